"""Activation patching written out by hand with forward hooks on a plain forward of our decoder,
by hook name and index: the references attribution patching and path patching are checked against."""

from __future__ import annotations

import torch

from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import LoadedModel
from transformer_viewer.model.decoder.hooks import hooks, run_with_cache
from transformer_viewer.model.tokenizers.tokenizer import Tokenized


def prompt_pair(T: int = 7, vocab: int = 300, changed=(2,), seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(clean, corrupted) ids, (T,) each, that differ at the positions `changed` only."""
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(3, vocab, (T,), generator=g)
    corrupted = clean.clone()
    for t in changed:
        corrupted[t] = 3 + (int(clean[t]) - 3 + 1 + int(torch.randint(0, vocab - 4, (1,), generator=g))) % (vocab - 3)
    return clean, corrupted


@torch.no_grad()
def cache_of(model, ids: torch.Tensor, names, named_hooks=()) -> dict[str, torch.Tensor]:
    """The activations at `names` of a plain forward of ids (T,) under `named_hooks`."""
    with hooks(model, list(named_hooks)):
        _, cache = run_with_cache(model, ids.reshape(1, -1), list(names))
    return cache


@torch.no_grad()
def metric_of(model, ids: torch.Tensor, metric, named_hooks=(), clean_lp=None) -> float:
    """The metric of a plain forward of ids (T,) with `named_hooks` (hook name, hook) in place."""
    with hooks(model, list(named_hooks)):
        logits, _ = model(ids.reshape(1, -1))  # (1, T, V)
    p = metric.resolve_position(ids.numel())
    return float(metric(logits[:, p], clean_lp)[0])


@torch.no_grad()
def clean_logprobs_of(model, clean: torch.Tensor, metric, named_hooks=()) -> torch.Tensor | None:
    """The clean run's log-softmax at the metric's position (V,), for the kl metric, under
    `named_hooks` (a head mask applies to the clean run too)."""
    if metric.kind != "kl":
        return None
    with hooks(model, list(named_hooks)):
        logits, _ = model(clean.reshape(1, -1))
    return torch.log_softmax(logits[0, metric.resolve_position(clean.numel())].float(), dim=-1)


def replacing(value: torch.Tensor, index) -> object:
    """A hook that returns its activation with act[index] = value[index] (a new tensor)."""
    def hook(_module, _inputs, act):
        out = act.clone()
        out[index] = value[index].to(out.dtype)
        return out
    return hook


def blending(source: torch.Tensor, eps: float, index) -> object:
    """A hook that moves act[index] a share `eps` of the way to source[index]: act + eps * (source - act)."""
    def hook(_module, _inputs, act):
        out = act.clone()
        out[index] = act[index] + eps * (source[index].to(act.dtype) - act[index])
        return out
    return hook


def pair_session(model, clean: torch.Tensor, corrupted: torch.Tensor) -> Session:
    """A session on `model` whose clean and corrupted prompts are the ids (T,) as they are,
    labelled t0, t1, ..."""
    def tokens(ids):
        ids = tuple(int(i) for i in ids)
        return Tokenized(ids, tuple(f"t{i}" for i in range(len(ids))), tuple((i, i + 1) for i in range(len(ids))),
                         "x" * len(ids))

    loaded = LoadedModel(model=model, config=model.config, format="native", source="<tiny>", name="tiny")
    s = Session(loaded)
    s.set_tokens(tokens(clean))
    s.set_corrupted_tokens(tokens(corrupted))
    return s
