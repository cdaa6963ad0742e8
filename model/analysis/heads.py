"""Head detection: what each attention head does, scored on the model's own forward passes.

The scorers at the top are pure functions of an attention pattern (..., T, T) with rows as
queries, so they can be checked on hand-built patterns whose answer is known. `detect_heads`
(which takes a Session, like the lens, the scan and generation) runs the model on two kinds of
input and applies them to every head's pattern, read from `blocks.{l}.attn.hook_pattern`:

- natural text (built-in snippets, or your own): previous-token, first-token and entropy;
- a seeded random token sequence repeated twice: induction and duplicate-token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.capture.memory_budget import check_scoring_budget, max_tokens, scoring_bytes
from transformer_viewer.model.decoder.hooks import caching
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.tokenizers.tokenizer import ENDOFTEXT_ID, GPT2_VOCAB

# name -> what it measures; the order is the table's column order.
SCORES = {
    "previous_token": "mean attention from position i to i-1 on natural text",
    "first_token": "mean attention to position 0 from positions 1.. on natural text (attention sink)",
    "induction": "mean attention from a repeated token to the token after its earlier copy",
    "duplicate_token": "mean attention from a repeated token to its earlier copy",
    "entropy": "mean entropy of a query's attention row on natural text, nats (positions 1..)",
}

# Natural text for the text-based scores: public-domain verse and scripture like the bundled
# model's training data, and plain modern prose, so a head is not judged on one register.
NATURAL_TEXT = (
    "Shall I compare thee to a summer's day? Thou art more lovely and more temperate: "
    "Rough winds do shake the darling buds of May, And summer's lease hath all too short a date: "
    "Sometime too hot the eye of heaven shines, And often is his gold complexion dimm'd; "
    "And every fair from fair sometime declines, By chance or nature's changing course untrimm'd.",
    "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer "
    "The slings and arrows of outrageous fortune, Or to take arms against a sea of troubles "
    "And by opposing end them. To die, to sleep; No more; and by a sleep to say we end "
    "The heart-ache and the thousand natural shocks That flesh is heir to.",
    "In the beginning God created the heaven and the earth. And the earth was without form, "
    "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the "
    "face of the waters. And God said, Let there be light: and there was light. And God saw the "
    "light, that it was good: and God divided the light from the darkness.",
    "The Lord is my shepherd; I shall not want. He maketh me to lie down in green pastures: he "
    "leadeth me beside the still waters. He restoreth my soul: he leadeth me in the paths of "
    "righteousness for his name's sake.",
    "The train left the station a little after seven, and by the time it reached the coast the "
    "rain had stopped. She took her bag from the rack, walked along the platform past the closed "
    "cafe, and found the road down to the harbour, where the boats were already coming in.",
)


# Passages of natural text one detection reads: each is a forward pass of its own, and the
# scores average over a few thousand positions, so a file of 200,000 one-word paragraphs is
# refused instead of run one by one.
MAX_PASSAGES = 1000


# -- pure scorers on patterns (..., T, T) -------------------------------------------------------
def _check(pattern: np.ndarray, min_t: int = 2) -> np.ndarray:
    p = np.asarray(pattern, dtype=np.float64)
    if p.ndim < 2 or p.shape[-1] != p.shape[-2]:
        raise ValueError(f"an attention pattern is (..., T, T); got shape {p.shape}")
    if p.shape[-1] < min_t:
        raise ValueError(f"need at least {min_t} positions, got {p.shape[-1]}")
    return p


def previous_token_score(pattern: np.ndarray) -> np.ndarray:
    """Mean of pattern[i, i-1] over queries i = 1..T-1; shape (...)."""
    p = _check(pattern)
    return np.diagonal(p, offset=-1, axis1=-2, axis2=-1).mean(axis=-1)


def first_token_score(pattern: np.ndarray) -> np.ndarray:
    """Mean of pattern[i, 0] over queries i = 1..T-1 (row 0 can only attend to itself)."""
    p = _check(pattern)
    return p[..., 1:, 0].mean(axis=-1)


def attention_entropy(pattern: np.ndarray) -> np.ndarray:
    """Mean entropy in nats of the rows i = 1..T-1 (row 0 is always 0), with 0 log 0 = 0."""
    p = _check(pattern)[..., 1:, :]
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return -plogp.sum(axis=-1).mean(axis=-1)


def _repeat_queries(T: int, n: int, offset: int) -> np.ndarray:
    if n < 1 or offset < 0 or offset + 2 * n > T:
        raise ValueError(f"a sequence of length {n} repeated twice after {offset} prefix tokens does not fit {T} positions")
    return np.arange(offset + n, offset + 2 * n)  # the second copy


def induction_score(pattern: np.ndarray, n: int, offset: int = 0) -> np.ndarray:
    """For a length-n sequence at positions offset.. repeated right after itself: mean over
    queries q of the second copy of pattern[q, q - n + 1], the token after q's earlier copy."""
    p = _check(pattern)
    q = _repeat_queries(p.shape[-1], n, offset)
    return p[..., q, q - n + 1].mean(axis=-1)


def duplicate_token_score(pattern: np.ndarray, n: int, offset: int = 0) -> np.ndarray:
    """Same input as `induction_score`: mean of pattern[q, q - n], q's earlier copy."""
    p = _check(pattern)
    q = _repeat_queries(p.shape[-1], n, offset)
    return p[..., q, q - n].mean(axis=-1)


# -- results -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class HeadScores:
    """Every score for every head, (n_layer, n_head) float32 arrays, and the inputs used."""

    previous_token: np.ndarray
    first_token: np.ndarray
    induction: np.ndarray
    duplicate_token: np.ndarray
    entropy: np.ndarray
    text_positions: int  # natural-text query positions the text scores average over
    induction_length: int  # n: the random sequence's length (the model saw it twice)
    induction_batch: int  # how many random sequences
    seed: int

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.previous_token.shape)

    def score(self, name: str) -> np.ndarray:
        name = normalise_score_name(name)
        return getattr(self, name)

    def best(self, name: str) -> tuple[int, int, float]:
        """(layer, head, value) of the head with the highest score `name`."""
        s = self.score(name)
        layer, head = np.unravel_index(int(np.argmax(s)), s.shape)
        return int(layer), int(head), float(s[layer, head])

    def rows(self, sort: str | None = None, descending: bool = True, top: int | None = None) -> list[dict]:
        """One dict per head (`layer`, `head`, then every score as a float), in layer/head
        order, or sorted by a score (ties keep layer/head order); `top` keeps the first N."""
        L, nh = self.shape
        rows = [{"layer": layer, "head": head, **{k: float(getattr(self, k)[layer, head]) for k in SCORES}}
                for layer in range(L) for head in range(nh)]
        if sort is not None and sort != "layer":
            key = normalise_score_name(sort)
            rows.sort(key=lambda r: -r[key] if descending else r[key])
        elif not descending:
            rows.reverse()
        return rows if top is None else rows[: max(0, int(top))]

    def to_dict(self) -> dict:
        return {
            "scores": {k: getattr(self, k).astype(float).round(6).tolist() for k in SCORES},
            "text_positions": self.text_positions, "induction_length": self.induction_length,
            "induction_batch": self.induction_batch, "seed": self.seed,
        }


def normalise_score_name(name: str) -> str:
    """`previous-token`, `previous_token`, `prev` ... -> the field name; ValueError otherwise."""
    key = name.strip().lower().replace("-", "_")
    key = {"prev": "previous_token", "previous": "previous_token", "sink": "first_token", "first": "first_token",
           "duplicate": "duplicate_token", "dup": "duplicate_token"}.get(key, key)
    if key not in SCORES:
        raise ValueError(f"unknown score {name!r}; choose one of {', '.join(k.replace('_', '-') for k in SCORES)}")
    return key


def check_passages(n: int) -> None:
    if n > MAX_PASSAGES:
        raise ModelError(f"the text has {n:,} passages (paragraphs between blank lines), more than the "
                         f"{MAX_PASSAGES:,} head scores read; give fewer, longer paragraphs")


# -- running the model ---------------------------------------------------------------------------
def _patterns(model, ids: torch.Tensor) -> np.ndarray:
    """Every layer's attention pattern for a batch of ids (B, T): (L, B, nh, T, T) float32."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.config.n_layer)]
    with torch.inference_mode(), caching(model, names) as patterns:
        model.run_blocks(model.embed(ids))  # no unembedding: (B, T, V) logits would be the biggest array
    return np.stack([patterns[n].float().cpu().numpy() for n in names])  # (L, B, nh, T, T)


def induction_candidates(model, exclude=()) -> np.ndarray:
    """Token ids to draw random sequences from: real GPT-2 ids (not padding rows) other than
    <|endoftext|> and `exclude`, whose embedding row is neither all zero nor shared with another
    token. Active-vocabulary training leaves the tokens it never saw with one common row (zero,
    or a learned vector): tokens no head could tell apart would say nothing about induction."""
    limit = min(model.config.vocab_size, GPT2_VOCAB)
    w = model.wte.weight[:limit].detach().float().cpu()  # (limit, C)
    nonzero = (w != 0).any(dim=1).numpy()
    # Equal rows have equal random projections; a collision of distinct rows only drops a token.
    direction = torch.randn(w.shape[1], generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    proj = (w.double() @ direction).numpy()  # (limit,)
    _, inverse, counts = np.unique(proj, return_inverse=True, return_counts=True)
    ids = np.flatnonzero(nonzero & (counts[inverse] == 1))
    return ids[~np.isin(ids, [ENDOFTEXT_ID, *exclude])]


def default_prefix(model) -> list[int]:
    """<|endoftext|>, the separator GPT-2-style models see before a document, if the model has it."""
    return [ENDOFTEXT_ID] if ENDOFTEXT_ID < model.config.vocab_size else []


def repeated_random_tokens(model, n: int, batch: int, seed: int, prefix: list[int] | None = None,
                           exclude=()) -> torch.Tensor:
    """ids (batch, len(prefix) + 2n): the prefix, then n distinct random tokens, then the same n
    again. Distinct, so each repeated token has exactly one earlier copy; never a prefix token,
    so the prefix cannot pass for an earlier copy either; never one of `exclude` (special
    tokens: a BOS or EOS inside the sequence would read as a document boundary)."""
    prefix = default_prefix(model) if prefix is None else [int(i) for i in prefix]
    candidates = induction_candidates(model, exclude=[*prefix, *exclude])
    if len(candidates) < n:
        raise ModelError(f"the model has only {len(candidates)} usable tokens; use a repeated sequence of at most that length")
    gen = torch.Generator().manual_seed(int(seed))
    rows = []
    for _ in range(batch):
        pick = candidates[torch.randperm(len(candidates), generator=gen)[:n].numpy()]
        rows.append(prefix + pick.tolist() * 2)
    return torch.tensor(rows, dtype=torch.long)  # (batch, len(prefix) + 2n)


def default_induction_length(model, prefix_len: int, cap: int = 64) -> int:
    return max(1, min(cap, (model.config.block_size - prefix_len) // 2))


def detect_heads(session, texts: list[str] | None = None, text_ids: list[list[int]] | None = None,
                 induction_length: int | None = None, induction_batch: int = 4, seed: int = 0,
                 prefix: list[int] | None = None, progress=None) -> HeadScores:
    """Score every head of the session's model (its prompt and cache are not used or changed).

    Text scores use `text_ids` if given, else `texts` (default: NATURAL_TEXT) tokenized with
    the session's tokenizer; each text is cut to the model's context and positions are pooled
    over all texts. The random sequences start with `prefix` (default: what the tokenizer starts
    a document with, e.g. <|endoftext|> or a BOS, where the vocabulary has it).

    At most MAX_PASSAGES texts; what each forward holds is checked against the session's memory
    budget (as a capture's is) before anything runs. `progress(done, total)` hears of each
    forward pass (the texts, then the random sequences).
    """
    model = session.model
    cfg = model.config
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        budget = session.memory_budget
        check_passages(len(text_ids) if text_ids is not None else len(NATURAL_TEXT if texts is None else texts))
        if text_ids is None:
            text_ids = [session.tokenizer.encode(t) for t in (NATURAL_TEXT if texts is None else texts)]
        text_ids = [list(ids)[: cfg.block_size] for ids in text_ids]
        text_ids = [ids for ids in text_ids if len(ids) >= 2]
        if not text_ids:
            raise ModelError("the natural text for head detection is empty; give at least two tokens of text")
        top = max(max(ids) for ids in text_ids)
        if top >= cfg.vocab_size:
            raise ModelError(f"token id {top} is outside this model's vocabulary of {cfg.vocab_size}")
        longest = max(len(ids) for ids in text_ids)
        check_scoring_budget(cfg, budget, longest, 1, f"a passage of {longest:,} tokens",
                             lambda fits: f"split the text into paragraphs of at most {fits:,} tokens "
                                          "(a blank line between)")
        if prefix is None:
            prefix = [i for i in session.tokenizer.document_prefix() if i < cfg.vocab_size]
        prefix = list(prefix)
        offset = len(prefix)
        n = default_induction_length(model, offset) if induction_length is None else int(induction_length)
        if offset + 2 * n > cfg.block_size:
            raise ModelError(f"a sequence of {n} tokens repeated twice needs {offset + 2 * n} positions; "
                             f"the model's context is {cfg.block_size}")

        def induction_advice(fits: int) -> str:
            batch_fits = budget // scoring_bytes(cfg, offset + 2 * n, 1)
            if batch_fits >= 1:
                return f"use --batch {batch_fits:,} or fewer at this length, or a shorter --length"
            longest = max(0, (max_tokens(lambda t: scoring_bytes(cfg, t), budget, cfg.block_size) - offset) // 2)
            return f"use a shorter --length (at most {longest:,}, with --batch 1)"

        check_scoring_budget(cfg, budget, offset + 2 * n, induction_batch,
                             f"{induction_batch:,} sequences of {n:,} tokens seen twice", induction_advice)
        total = len(text_ids) + 1

        L, nh = cfg.n_layer, cfg.n_head
        sums = {k: np.zeros((L, nh)) for k in ("previous_token", "first_token", "entropy")}
        positions = 0
        for done, ids in enumerate(text_ids):
            if progress is not None:
                progress(done, total)
            pat = _patterns(model, torch.tensor([ids], dtype=torch.long, device=device))[:, 0]  # (L, nh, T, T)
            weight = len(ids) - 1  # query positions each score averages over
            for layer, p in enumerate(pat):  # a layer at a time: the float64 copies stay one layer's size
                sums["previous_token"][layer] += previous_token_score(p) * weight
                sums["first_token"][layer] += first_token_score(p) * weight
                sums["entropy"][layer] += attention_entropy(p) * weight
            del pat
            positions += weight

        if progress is not None:
            progress(total - 1, total)
        specials = [i for i in range(min(cfg.vocab_size, GPT2_VOCAB)) if session.tokenizer.is_special(i)]
        ids = repeated_random_tokens(model, n, induction_batch, seed, prefix, exclude=specials)
        pat = _patterns(model, ids.to(device))  # (L, B, nh, T, T)
        induction = np.stack([induction_score(p, n, offset).mean(axis=0) for p in pat])  # (L, nh)
        duplicate = np.stack([duplicate_token_score(p, n, offset).mean(axis=0) for p in pat])  # (L, nh)
        if progress is not None:
            progress(total, total)
    finally:
        model.train(was_training)

    def f32(a):
        a = np.array(a, dtype=np.float32)
        a.setflags(write=False)  # the dataclass is frozen; so are its arrays
        return a

    return HeadScores(
        previous_token=f32(sums["previous_token"] / positions), first_token=f32(sums["first_token"] / positions),
        induction=f32(induction), duplicate_token=f32(duplicate), entropy=f32(sums["entropy"] / positions),
        text_positions=positions, induction_length=n, induction_batch=int(induction_batch), seed=int(seed),
    )
