"""Masked minus clean: what a head mask changed, array by array, for the diff views.

Differences are taken in float32 and stored in the dtype of the captured arrays (float16 for
patterns and MLP activations by default), so identical inputs give exactly zero. The logit-lens
difference is about the clean run's top token at each cell: p_masked(clean top) - p_clean(clean
top), which needs the masked lens computed with `reference_ids=clean_lens.top_ids`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transformer_viewer.model.analysis.lens import LogitLens
from transformer_viewer.model.capture.trace import Trace
from transformer_viewer.model.errors import ModelError


@dataclass(frozen=True)
class TraceDiff:
    attention: np.ndarray | None  # (L, nh, T, T), masked - clean; None unless both traces kept it
    resid_norms: np.ndarray  # (2L + 2, T) float32
    mlp_post: np.ndarray | None  # (L, T, n_mlp); None unless both traces kept it
    head_norms: np.ndarray  # (L, nh, T) float32
    next_probs: np.ndarray  # (V,) float32, at the traces' prediction position
    lens_probs: np.ndarray | None  # (L + 1, T) float32, p_masked(clean top) - p_clean(clean top)
    mask: np.ndarray  # (L, nh) bool, the masked run's heads
    ablation: str
    overview_mean: np.ndarray | None = None  # (L, nh, n, n), the pooled patterns' difference
    mlp_mean: np.ndarray | None = None  # (L, n_mlp) float32, each neuron's mean over the tokens

    @property
    def is_zero(self) -> bool:
        arrays = [self.attention, self.resid_norms, self.mlp_post, self.head_norms, self.next_probs,
                  self.lens_probs, self.overview_mean, self.mlp_mean]
        return all(not np.any(a) for a in arrays if a is not None)


def subtract(masked: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """masked - clean in float32, returned in the inputs' (promoted) dtype."""
    if masked.shape != clean.shape:
        raise ModelError(f"cannot compare arrays of shapes {masked.shape} and {clean.shape}")
    dtype = np.result_type(masked.dtype, clean.dtype)
    out = np.empty(masked.shape, dtype=dtype)
    # Per leading slice: a (L, nh, T, T) float32 temporary would double the peak memory.
    if masked.ndim >= 3:
        for i in range(masked.shape[0]):
            out[i] = masked[i].astype(np.float32) - clean[i].astype(np.float32)
    else:
        out[...] = masked.astype(np.float32) - clean.astype(np.float32)
    return out


def trace_diff(clean: Trace, masked: Trace, clean_lens: LogitLens | None = None,
               masked_lens: LogitLens | None = None) -> TraceDiff:
    """masked - clean for every captured array. Both traces must cover the same tokens."""
    if not np.array_equal(clean.token_ids, masked.token_ids):
        raise ModelError("the clean and masked runs are of different prompts; run both on the same text")
    if clean.next.position != masked.next.position:
        raise ModelError("the clean and masked runs predict at different positions; run both at the same one")
    lens = None
    if clean_lens is not None and masked_lens is not None:
        lens = lens_diff(clean_lens, masked_lens)
    def both(name):
        a, b = getattr(masked, name), getattr(clean, name)
        return None if a is None or b is None else subtract(a, b)

    return TraceDiff(
        attention=both("attention"),
        resid_norms=subtract(masked.resid_norms, clean.resid_norms),
        mlp_post=both("mlp_post"),
        overview_mean=subtract(masked.overview_mean, clean.overview_mean),
        mlp_mean=subtract(masked.mlp_mean, clean.mlp_mean),
        head_norms=subtract(masked.head_norms, clean.head_norms),
        next_probs=subtract(masked.next.probs, clean.next.probs),
        lens_probs=lens, mask=masked.mask.copy(), ablation=masked.ablation,
    )


def lens_diff(clean_lens: LogitLens, masked_lens: LogitLens) -> np.ndarray:
    """(L + 1, T): p_masked(clean top token) - p_clean(clean top token)."""
    if not np.array_equal(masked_lens.reference_ids, clean_lens.top_ids):
        raise ModelError("the masked logit lens must be computed with reference_ids=clean_lens.top_ids")
    return subtract(masked_lens.reference_probs, clean_lens.top_probs)
