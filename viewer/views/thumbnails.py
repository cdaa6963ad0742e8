"""Thumbnails of every head's pattern for the heads grid: pooled from full patterns or from a
trace's overviews down to at most THUMB x THUMB, and tiled into one image."""

from __future__ import annotations

import math

import numpy as np

THUMB = 64  # pixels per thumbnail side, at most
_HALF_TO_FLOAT = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)  # every float16's value
GAP = 0.12  # space between tiles, as a fraction of a tile


def max_pool(attention: np.ndarray, size: int = THUMB) -> np.ndarray:
    """(L, nh, T, T) -> (L, nh, S, S) float32 with S <= size, each cell the max of its block."""
    L, nh, T, T2 = attention.shape
    k = max(1, math.ceil(max(T, T2) / size))
    if k == 1:
        return np.asarray(attention, dtype=np.float32)
    S, S2 = math.ceil(T / k), math.ceil(T2 / k)
    if (S * k, S2 * k) != (T, T2):
        padded = np.zeros((L, nh, S * k, S2 * k), dtype=attention.dtype)
        padded[:, :, :T, :T2] = attention
        attention = padded
    a = np.ascontiguousarray(attention)
    if a.dtype == np.float16:
        # numpy has no fast float16 max; for non-negative halves the bit patterns sort like the
        # values, so take the max as uint16. A negative value (sign bit) would win: then redo.
        pooled = _pool(a.view(np.uint16), L, nh, S, S2, k)
        if not (pooled >= 0x8000).any():
            return _HALF_TO_FLOAT[pooled]  # a table lookup: numpy's float16 -> float32 cast is slower
        a = a.astype(np.float32)
    return _pool(a, L, nh, S, S2, k).astype(np.float32)


def cell_counts(T: int, cell: int) -> np.ndarray:
    """(n,) tokens in each overview cell along a side (the last may hold fewer)."""
    n = -(-T // cell)
    counts = np.full(n, cell, dtype=np.float64)
    if n:
        counts[-1] = T - cell * (n - 1)
    return counts


def mean_pool(overview_mean: np.ndarray, T: int, cell: int, size: int = THUMB) -> np.ndarray:
    """(L, nh, n, n) block means of a T-token pattern (cells of `cell` tokens) -> (L, nh, S, S)
    means over blocks of k cells, S <= size: each weighted by the tokens it covers, so the
    result is the mean of the pattern over each thumbnail block."""
    L, nh, n, _ = overview_mean.shape
    k = max(1, math.ceil(n / size))
    if k == 1:
        return np.asarray(overview_mean, dtype=np.float32)
    S = math.ceil(n / k)
    counts = np.zeros(S * k)
    counts[:n] = cell_counts(T, cell)
    weights = np.outer(counts, counts).astype(np.float32)  # (S k, S k) tokens per cell
    padded = np.zeros((L, nh, S * k, S * k), dtype=np.float32)
    padded[:, :, :n, :n] = overview_mean
    padded *= weights
    sums = padded.reshape(L, nh, S, k, S, k).sum(axis=(3, 5))  # (L, nh, S, S)
    return sums / weights.reshape(S, k, S, k).sum(axis=(1, 3))


def _pool(a: np.ndarray, L: int, nh: int, S: int, S2: int, k: int) -> np.ndarray:
    # Rows first: k whole rows reduce element-wise (vectorised), then the k columns of each
    # cell as k strided slices, element-wise too (a reduce over a short inner axis is slow).
    rows = a.reshape(L, nh, S, k, S2 * k).max(axis=3)  # (L, nh, S, S2 * k)
    out = rows[..., 0::k].copy()  # (L, nh, S, S2)
    for j in range(1, k):
        np.maximum(out, rows[..., j::k], out=out)
    return out


def thumb_size(n_heads: int) -> int:
    """Thumbnail side for a model of `n_heads` heads: smaller for 1,000 heads, so the grid's
    image (and its redraw) stays a few megapixels."""
    return THUMB if n_heads <= 512 else THUMB // 2


GAP_INDEX = 255  # the colour-table entry of the gaps between tiles (transparent)


def colour_table(cmap) -> np.ndarray:
    """(256, 4) uint8 RGBA: entries 0..254 the colormap from low to high, GAP_INDEX transparent."""
    table = np.zeros((256, 4), dtype=np.uint8)
    table[:GAP_INDEX] = cmap.getLookupTable(nPts=GAP_INDEX, alpha=True, mode="byte")
    return table


def tile_indexed(thumbs: np.ndarray, levels: tuple[float, float]) -> tuple[np.ndarray, int]:
    """(L, nh, S, S) values -> one (L * P, nh * P) uint8 image of colour-table indices, the
    fixed `levels` mapped onto 0..254 and the gaps (and NaN) on GAP_INDEX. Qt draws it as an
    indexed image as it is: no per-pixel float scaling or transparency pass at each redraw."""
    lo, hi = levels
    scale = (GAP_INDEX - 1) / (hi - lo) if hi > lo else 0.0
    q = (np.asarray(thumbs, dtype=np.float32) - np.float32(lo)) * np.float32(scale) + np.float32(0.5)
    gaps = np.isnan(q)
    np.clip(q, 0, GAP_INDEX - 1, out=q)
    q[gaps] = GAP_INDEX
    return tile(q.astype(np.uint8), GAP_INDEX)


def tile(thumbs: np.ndarray, gap_value=np.nan) -> tuple[np.ndarray, int]:
    """(L, nh, S, S) -> one (L * P, nh * P) image of thumbs' dtype with `gap_value` gaps,
    P = S + gap pixels."""
    L, nh, S, S2 = thumbs.shape
    gap = max(1, round(GAP * S))
    P = max(S, S2) + gap
    out = np.full((L * P, nh * P), gap_value, dtype=thumbs.dtype)
    view = out.reshape(L, P, nh, P)  # (L, P, nh, P)
    view[:, :S, :, :S2] = thumbs.transpose(0, 2, 1, 3)  # (L, S, nh, S)
    return out, P
