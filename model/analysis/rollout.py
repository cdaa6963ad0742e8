"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"): how
much of what a query position holds after a range of layers came from each input token, if
attention were the only way information moved and the residual stream carried the rest.

Each layer's heads are combined into one matrix (their mean, their maximum, or the mean of a
chosen subset), the residual connection is added as the identity, A~ = (A + I) / 2 (the paper's
equal weights), and each row is renormalised to sum to 1 (a maximum over heads does not). The
rollout of layers a..b-1 is the product A~_{b-1} A~_{b-2} ... A~_a: row q, read from the top,
spreads query q's unit of "attention" down through the layers to the tokens.

One row needs every lower layer's rows up to it: row q of the product is e_q A~_{b-1}, a row
vector supported on positions <= q, times A~_{b-2}, and so on, and each step reads all rows
0..q of that layer's pattern. So rows are computed on demand, a block of query rows at a time
(at most `MAX_ROWS`), never the whole (T, T) product: a block costs each layer's pattern rows
up to the block's last query (the attention part of one capture at that length: at 4,096
tokens of SmolLM2-135M's shape nh x T^2 / 2 = 75M scores per layer) plus rows x T^2 / 2
multiply-adds per layer for the product, and (rows, T) floats of memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.capture.interventions import Intervention, requested
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels.attention_kernels import pattern_rows

MAX_ROWS = 512  # query rows one call computes: (rows, T) floats of product, rows x T^2 work per layer
LAYER_BLOCK = 256  # pattern rows of a layer combined at once: (nh, 256, T) floats


@dataclass(frozen=True)
class RolloutRows:
    """Rows first..first + len(rows) - 1 of the rollout of layers [layers[0], layers[1])."""

    rows: np.ndarray  # (r, T) float32; row i is query first + i's share of each token (sums to 1; 0 past it)
    first: int
    layers: tuple[int, int]
    heads: str  # "mean", "max", or the chosen heads as "L.H,L.H"
    residual: bool  # whether the identity for the residual stream was added


def _combine(pattern: torch.Tensor, how: str, chosen: np.ndarray | None) -> torch.Tensor:
    """(nh, r, b) pattern rows of one layer -> (r, b): the heads' mean, maximum, or mean of the chosen."""
    if chosen is not None:
        if not chosen.any():
            return torch.zeros_like(pattern[0])
        return pattern[torch.as_tensor(chosen, device=pattern.device)].mean(dim=0)
    return pattern.max(dim=0).values if how == "max" else pattern.mean(dim=0)


def head_selection(heads, config) -> tuple[str, np.ndarray | None]:
    """`heads`: "mean", "max", or an iterable of (layer, head) pairs -> (how, (L, nh) bool or None)."""
    if isinstance(heads, str):
        if heads not in ("mean", "max"):
            raise ModelError(f"heads {heads!r}: use mean, max, or a list of (layer, head) pairs")
        return heads, None
    chosen = np.zeros((config.n_layer, config.n_head), dtype=bool)
    for layer, head in heads:
        if not (0 <= layer < config.n_layer and 0 <= head < config.n_head):
            raise ModelError(f"head {layer}.{head} is not in this model's {config.n_layer} layers x "
                             f"{config.n_head} heads")
        chosen[layer, head] = True
    if not chosen.any():
        raise ModelError("choose at least one head for the rollout")
    return "subset", chosen


def heads_label(how: str, chosen: np.ndarray | None) -> str:
    if chosen is None:
        return how
    return ",".join(f"{layer}.{head}" for layer, head in zip(*np.nonzero(chosen), strict=True))


@torch.inference_mode()
def rollout_rows(session, first: int, stop: int, layers: tuple[int, int] | None = None, heads="mean",
                 residual: bool = True, intervention: Intervention | None = None, mask=None, ablation: str | None = None,
                 step: Callable[[int, int], None] | None = None) -> RolloutRows:
    """Rows first..stop-1 of the rollout through `layers` = (a, b) (default: every layer), in
    the session's run under `mask`. `heads`: "mean", "max", or (layer, head) pairs whose mean is
    taken in each layer (a layer with none of them passes only its residual). `step(i, n)` hears
    of each layer as it starts and may raise to stop."""
    change = requested(session.config, intervention, mask, ablation)  # a bare mask: made by Intervention.make
    mask, ablation = change.mask, change.ablation
    c = session.config
    if session.tokens is None or not session.tokens.ids:
        raise ModelError("the prompt is empty; type some text first")
    T = len(session.tokens.ids)
    if not 0 <= first < stop <= T:
        raise ModelError(f"query rows {first}..{stop - 1} are outside the prompt's {T} tokens")
    if stop - first > MAX_ROWS:
        raise ModelError(f"{stop - first} rollout rows at once; ask for at most {MAX_ROWS}")
    a, b = (0, c.n_layer) if layers is None else (int(layers[0]), int(layers[1]))
    if not 0 <= a < b <= c.n_layer:
        raise ModelError(f"layers {a}:{b} are not a range within this model's {c.n_layer} layers")
    how, chosen = head_selection(heads, c)
    if not residual and how == "subset" and not all(chosen[layer].any() for layer in range(a, b)):
        raise ModelError("without the residual term every layer of the range needs a chosen head")
    try:
        session.residuals()
    except ModelError:
        session.predict(None)
    resid = session.masked_residuals(change)
    model = session.model
    r = stop - first
    # The running product, (r, stop): row i starts as query first + i's unit vector.
    out = torch.zeros(r, stop, dtype=torch.float32, device=resid[0].device)
    out[torch.arange(r), torch.arange(first, stop)] = 1.0
    for i, layer in enumerate(range(b - 1, a - 1, -1)):
        if step is not None:
            step(i, b - a)
        block = model.blocks[layer]
        qh, kh, _vh = block.attn.heads_qkv(block.ln_1(resid[layer][:, :stop]))  # (1, nh, stop, hs) each
        sel = None if chosen is None else chosen[layer]
        nxt = torch.zeros_like(out)
        for q0 in range(0, stop, LAYER_BLOCK):
            q1 = min(stop, q0 + LAYER_BLOCK)
            rows = _combine(pattern_rows(qh, kh, q0, q1, block.attn.window, block.attn.softcap)[0].float(), how, sel)  # (q1 - q0, q1)
            if residual:
                rows = 0.5 * rows
                rows[torch.arange(q1 - q0), torch.arange(q0, q1)] += 0.5
            rows = rows / rows.sum(dim=-1, keepdim=True).clamp_min(1e-30)  # rows sum to 1 again
            nxt[:, :q1] += out[:, q0:q1] @ rows  # (r, q1 - q0) @ (q1 - q0, q1)
        out = nxt
    rows = np.zeros((r, T), dtype=np.float32)  # keys past the last query row hold nothing
    rows[:, :stop] = out.cpu().numpy()
    return RolloutRows(rows=rows, first=first, layers=(a, b), heads=heads_label(how, chosen),
                       residual=residual)
