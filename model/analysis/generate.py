""""Continue": extend the prompt by N tokens, greedy or sampled, with or without a head mask.

The model has no key/value cache, so each new token is one forward over the window; a window
longer than block_size slides (keeps its last block_size tokens). Sampling draws from a
torch.Generator seeded by `seed`, so the same seed gives the same text; with no seed one is
drawn and returned, so any run can be repeated. The session's prompt and cache are untouched.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.capture.interventions import Intervention, requested
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.tokenizers.tokenizer import decode_after

MAX_NEW_TOKENS = 4096


@dataclass(frozen=True)
class Generation:
    prompt_ids: np.ndarray  # (T0,) int64
    new_ids: np.ndarray  # (N,) int64, fewer than asked when cancelled
    new_probs: np.ndarray  # (N,) float32, probability of each chosen token under the sampling distribution
    new_text: str  # the decoded new tokens
    text: str  # prompt text + new_text
    greedy: bool
    temperature: float
    top_k: int | None
    seed: int | None  # None for greedy
    mask: np.ndarray  # (L, nh) bool
    ablation: str
    cancelled: bool


@torch.inference_mode()
def generate(session, n_tokens: int, temperature: float = 0.0, top_k: int | None = None,
             seed: int | None = None, intervention: Intervention | None = None, mask=None,
             ablation: str | None = None, prompt_ids=None,
             progress: Callable[[int, int], None] | None = None,
             is_cancelled: Callable[[], bool] | None = None) -> Generation:
    """Generate `n_tokens` after the session's prompt (or `prompt_ids`). temperature 0 is greedy
    (argmax, ties to the lowest id); otherwise softmax(logits / temperature), limited to the
    `top_k` most likely tokens when given."""
    n_tokens = int(n_tokens)
    if not 0 <= n_tokens <= MAX_NEW_TOKENS:
        raise ModelError(f"the number of tokens to generate must be between 0 and {MAX_NEW_TOKENS}, got {n_tokens}")
    temperature = float(temperature)
    if not temperature >= 0.0 or not np.isfinite(temperature):
        raise ModelError(f"temperature must be 0 (greedy) or positive, got {temperature}")
    if top_k is not None and int(top_k) < 1:
        raise ModelError(f"top-k must be at least 1, got {top_k}")
    c = session.config
    change = requested(c, intervention, mask, ablation)  # a bare mask: made by Intervention.make
    mask, ablation = change.mask, change.ablation
    if prompt_ids is None:
        if session.tokens is None or not session.tokens.ids:
            raise ModelError("the prompt is empty; type some text first")
        prompt_ids = session.tokens.ids
        prompt_text = session.tokens.text
    else:
        prompt_text = session.tokenizer.decode(prompt_ids)
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise ModelError("the prompt is empty; type some text first")
    greedy = temperature == 0.0
    if not greedy and seed is None:
        seed = secrets.randbits(63)
    device = session.device
    gen = None
    if not greedy:
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seed))
    V = session.n_vocab
    k = None if top_k is None else min(int(top_k), V)
    ids = list(prompt)
    new_ids: list[int] = []
    new_probs: list[float] = []
    check = is_cancelled or (lambda: False)
    cancelled = False
    # Only the last position's output is read: the last layer computes it alone, unless a head
    # of that layer is mean-ablated (its mean needs every position).
    # A clamp's hook reads its positions from the rows it sees: with clamps every row is run.
    last_only = (ablation == "zero" or not mask[-1].any()) and not change.clamps
    with hooks(session.model, session.intervention_hooks(change)):
        for n in range(n_tokens):
            if check():
                cancelled = True
                break
            window = torch.tensor([ids[-c.block_size:]], dtype=torch.long, device=device)  # (1, T)
            x = session.model.run_blocks(session.model.embed(window), last_only=last_only)  # (1, 1 or T, C)
            logits = session.model.unembed(x[0, -1])[:V].float()  # (V,)
            if greedy:
                nxt = int(torch.argmax(logits))
                prob = float(torch.softmax(logits, dim=-1)[nxt])
            else:
                scaled = logits / temperature
                if k is not None and k < V:
                    kth = torch.topk(scaled, k).values[-1]
                    scaled = scaled.masked_fill(scaled < kth, float("-inf"))
                probs = torch.softmax(scaled, dim=-1)  # (V,)
                nxt = int(torch.multinomial(probs, 1, generator=gen))
                prob = float(probs[nxt])
            ids.append(nxt)
            new_ids.append(nxt)
            new_probs.append(prob)
            if progress:
                progress(n + 1, n_tokens)
    new_text = decode_after(session.tokenizer, prompt, new_ids)
    return Generation(
        prompt_ids=np.asarray(prompt, dtype=np.int64), new_ids=np.asarray(new_ids, dtype=np.int64),
        new_probs=np.asarray(new_probs, dtype=np.float32), new_text=new_text, text=prompt_text + new_text,
        greedy=greedy, temperature=temperature, top_k=k, seed=None if greedy else int(seed), mask=mask,
        ablation=ablation, cancelled=cancelled,
    )
