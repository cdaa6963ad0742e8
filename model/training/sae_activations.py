"""A model's activations at one hook point, streamed over windows of token ids.

What an SAE is trained and measured on: the activation at a named HookPoint (`hooks.reading`),
for windows of `context_size` tokens drawn from a token array, flattened to (tokens, d_in). The
forward stops after the hook's block, and only `windows_per_forward` windows run at once, so
memory stays bounded however long the text is. A window starts with the tokenizer's prefix (a
BOS) when it has one, as every prompt the viewer runs does; those positions are dropped from
the activations: a BOS's residual is an outlier an SAE would spend features on.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.decoder import hooks
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.errors import ModelError

_BLOCK = re.compile(r"^blocks\.(\d+)\.")
HOOK_Z_SUFFIX = "attn.hook_z"  # (B, T, nh, hs): flattened to nh * hs, as SAELens's "hook_z" reshape


@dataclass(frozen=True)
class HookSite:
    """Where the activations come from: the hook's name, the blocks to run to reach it, its width."""

    name: str
    stop_block: int  # run blocks [0, stop_block) (all blocks for a hook outside them)
    d_in: int
    reshape: str  # "none" or "hook_z" (SAELens's name for flattening heads)


def hook_site(model: GPT, name: str) -> HookSite:
    """The site of hook `name` in `model`, its width found by running one token; an unknown name,
    or an activation that is not one vector per token, is one line."""
    try:
        hooks.find_hook_point(model, name)
    except KeyError:
        examples = f"blocks.0.hook_resid_post ... blocks.{model.config.n_layer - 1}.hook_resid_post"
        raise ModelError(f"--hook {name}: the model has no such hook point; residual hooks are {examples} "
                         "(also hook_resid_pre, hook_resid_mid, hook_attn_out, hook_mlp_out, attn.hook_z)") from None
    m = _BLOCK.match(name)
    stop = int(m.group(1)) + 1 if m else model.config.n_layer
    reshape = "hook_z" if name.endswith(HOOK_Z_SUFFIX) else "none"
    site = HookSite(name, stop, 0, reshape)
    probe = torch.zeros((1, 1), dtype=torch.long, device=next(model.parameters()).device)
    shape = _activation(model, site, probe).shape
    if reshape == "none" and len(shape) != 3:
        raise ModelError(f"--hook {name}: its activation has shape {tuple(shape)}, not one vector per token; "
                         "train an SAE on a residual, attention-output, MLP-output or attn.hook_z hook")
    return HookSite(name, stop, int(shape[-1]) if reshape == "none" else int(shape[-2] * shape[-1]), reshape)


def _activation(model: GPT, site: HookSite, ids: torch.Tensor) -> torch.Tensor:
    """The hook's activation for token ids (B, T), running only the blocks up to it."""
    seen: list[torch.Tensor] = []
    with torch.no_grad(), hooks.reading(model, [(site.name, seen.append)]):
        x = model.embed(ids)
        x = model.run_blocks(x, 0, site.stop_block)
        if not seen:  # a hook after the blocks (hook_final): the rest of the forward
            model.unembed(x)
    return seen[0]


def activations(model: GPT, site: HookSite, windows: torch.Tensor, skip: int) -> torch.Tensor:
    """(B * (T - skip), d_in) float32 activations of windows (B, T), each window's first `skip`
    positions (its BOS prefix) left out."""
    act = _activation(model, site, windows)
    if site.reshape == "hook_z":
        act = act.flatten(-2)  # (B, T, nh * hs)
    return act[:, skip:].reshape(-1, site.d_in).float()  # (B * (T - skip), d_in)


def window_starts(n_tokens: int, body: int, count: int, gen: torch.Generator) -> np.ndarray:
    """`count` seeded random starts of windows of `body` tokens inside an array of `n_tokens`."""
    if n_tokens < body:
        raise ModelError(f"the text holds {n_tokens} tokens, fewer than one window of {body}; give more text "
                         "or a smaller --context-size")
    return torch.randint(0, n_tokens - body + 1, (count,), generator=gen).numpy()


def windows_at(tokens: np.ndarray, starts: np.ndarray, body: int, prefix: tuple[int, ...], device) -> torch.Tensor:
    """(B, len(prefix) + body) token ids: each window's body from `tokens`, after the prefix."""
    rows = np.stack([tokens[s : s + body] for s in starts]).astype(np.int64)  # (B, body)
    if prefix:
        rows = np.concatenate([np.tile(np.asarray(prefix, dtype=np.int64), (len(starts), 1)), rows], axis=1)
    return torch.from_numpy(rows).to(device)


def stream(model: GPT, site: HookSite, tokens: np.ndarray, context_size: int, prefix: tuple[int, ...],
           windows_per_forward: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless shuffled activations from random windows of `tokens`, one forward's worth at a time:
    each yield is (windows_per_forward * body, d_in), its rows in a seeded random order, so a batch
    cut from it mixes windows and positions."""
    body = context_size - len(prefix)
    device = next(model.parameters()).device
    while True:
        starts = window_starts(len(tokens), body, windows_per_forward, gen)
        acts = activations(model, site, windows_at(tokens, starts, body, prefix, device), len(prefix))
        yield acts[torch.randperm(acts.shape[0], generator=gen).to(acts.device)]


def evenly_spaced_windows(n_tokens: int, body: int, count: int) -> np.ndarray:
    """Up to `count` non-overlapping window starts spread over the whole array: a fixed
    evaluation set, the same every call."""
    fit = n_tokens // body
    if fit < 1:
        raise ModelError(f"the validation text holds {n_tokens} tokens, fewer than one window of {body}; give "
                         "more text, a larger --val-fraction or a smaller --context-size")
    chosen = np.linspace(0, fit - 1, num=min(count, fit)).round().astype(np.int64)
    return np.unique(chosen) * body


TEXT_PIECE_CHARS = 1_000_000  # a tokenizer call's share of a long file, cut at a line break


def tokenized_corpus(paths: list[str], val_fraction: float, tokenizer, vocab_size: int):
    """The training text as token ids of the model's own tokenizer, the last `val_fraction` of
    each file held out (a `Corpus`, as `train` reads it). GPT-2's tokenizer reads the files as
    `train` does; another tokenizer encodes each file in pieces of whole lines, without special
    tokens (each window gets the tokenizer's prefix when it runs)."""
    from transformer_viewer.model.training.data import Corpus, load_corpus, read_text

    if tokenizer.spec == "gpt2":
        corpus = load_corpus(paths, val_fraction=val_fraction)
    else:
        if not 0.0 < val_fraction < 1.0:
            raise ModelError(f"the validation fraction must be between 0 and 1, got {val_fraction}")
        train, val, files = [], [], []
        for path in paths:
            text, digest = read_text(path)
            ids: list[int] = []
            start = 0
            while start < len(text):
                cut = text.rfind("\n", start, start + TEXT_PIECE_CHARS) + 1 if len(text) - start > TEXT_PIECE_CHARS else 0
                end = cut if cut > start else min(len(text), start + TEXT_PIECE_CHARS)
                ids += tokenizer.encode(text[start:end], add_special_tokens=False)
                start = end
            arr = np.asarray(ids, dtype=np.int64)
            cut_at = int(len(arr) * (1.0 - val_fraction))
            train.append(arr[:cut_at])
            val.append(arr[cut_at:])
            files.append({"path": os.path.basename(path), "sha256": digest, "tokens": int(len(arr))})
        corpus = Corpus(np.concatenate(train), np.concatenate(val), tuple(files))
    for data in (corpus.train, corpus.val):
        if len(data) and int(data.max()) >= vocab_size:
            raise ModelError(f"the text tokenizes to id {int(data.max())}, outside the model's vocabulary of "
                             f"{vocab_size}; its tokenizer does not match the model")
    return corpus
