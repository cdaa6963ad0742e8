"""Pooled attention overviews: each head's (T, T) pattern as at most 256 x 256 cells, built
block by block while the forward computes it, so the whole pattern never exists.

A cell covers `cell` x `cell` tokens (`cell = ceil(T / 256)`, so the cells are square and the
same size everywhere; the last row and column of cells may be cut short by the prompt's end).
Each cell holds the max and the mean of the pattern over its tokens, the future (zeros)
included, exactly as pooling the full pattern would. With T <= 256 a cell is one token and the
overview is the pattern itself.
"""

from __future__ import annotations

import math

import numpy as np
import torch

MAX_CELLS = 256  # cells per side of an overview


def cell_size(T: int, max_cells: int = MAX_CELLS) -> int:
    """Tokens per cell side for a T-token prompt."""
    return max(1, math.ceil(T / max_cells))


def n_cells(T: int, max_cells: int = MAX_CELLS) -> int:
    """Cells per side for a T-token prompt."""
    return math.ceil(T / cell_size(T, max_cells)) if T else 0


def cell_counts(T: int, cell: int) -> np.ndarray:
    """(n,) tokens in each cell along one side (the last may hold fewer)."""
    n = math.ceil(T / cell)
    counts = np.full(n, cell, dtype=np.int64)
    if n:
        counts[-1] = T - cell * (n - 1)
    return counts


class OverviewPooler:
    """Accumulates one layer's overview from the blocks of pattern rows the attention computes.

    `__call__(first_row, rows)` takes rows (B, nh, r, b) of query rows first_row.. against keys
    0..b-1 (batch element 0 is pooled); `finish(max_out, mean_out)` writes (nh, n, n) results.
    """

    def __init__(self, n_head: int, T: int, device, max_cells: int = MAX_CELLS):
        self.T = T
        self.cell = cell_size(T, max_cells)
        self.n = n_cells(T, max_cells)
        self.max = torch.zeros(n_head, self.n, self.n, dtype=torch.float32, device=device)
        self.sum = torch.zeros(n_head, self.n, self.n, dtype=torch.float32, device=device)

    def __call__(self, first_row: int, rows: torch.Tensor) -> None:
        w = self.cell
        rows = rows[0]  # (nh, r, b)
        nh, r, b = rows.shape
        full = b // w  # column cells wholly inside the visible keys
        col_max = rows.new_zeros(nh, r, -(-b // w))  # (nh, r, cells over 0..b-1)
        col_sum = rows.new_zeros(nh, r, -(-b // w))
        if full:
            body = rows[..., : full * w].unflatten(-1, (full, w))  # (nh, r, full, w), a view
            torch.amax(body, dim=-1, out=col_max[..., :full])
            torch.sum(body, dim=-1, out=col_sum[..., :full])
        if b > full * w:  # the cell the visible keys end in
            tail = rows[..., full * w:]  # (nh, r, b - full * w)
            col_max[..., full] = tail.amax(dim=-1)
            col_sum[..., full] = tail.sum(dim=-1)
        # Rows pool into row cells: whole cells by a reshape, the cut cells at either end alone.
        m = col_max.shape[-1]
        a, b = first_row, first_row + r
        lo, hi = min(-(-a // w) * w, b), max(b // w * w, min(-(-a // w) * w, b))  # whole cells: rows lo..hi-1
        for r0, r1 in ((a, lo), (hi, b)):
            if r1 > r0:
                cell = r0 // w
                acc = self.max[:, cell, :m]
                torch.maximum(acc, col_max[:, r0 - a:r1 - a].amax(dim=1), out=acc)
                self.sum[:, cell, :m] += col_sum[:, r0 - a:r1 - a].sum(dim=1)
        if hi > lo:
            k = (hi - lo) // w
            cells = slice(lo // w, hi // w)
            body_max = col_max[:, lo - a:hi - a].unflatten(1, (k, w)).amax(dim=2)  # (nh, k, m)
            body_sum = col_sum[:, lo - a:hi - a].unflatten(1, (k, w)).sum(dim=2)
            acc = self.max[:, cells, :m]
            torch.maximum(acc, body_max, out=acc)
            self.sum[:, cells, :m] += body_sum

    def finish(self, max_out: np.ndarray, mean_out: np.ndarray) -> None:
        """Write the (nh, n, n) max and mean into the given arrays (any float dtype)."""
        counts = torch.from_numpy(cell_counts(self.T, self.cell)).to(self.sum)  # (n,)
        mean = self.sum / (counts[:, None] * counts[None, :])  # (nh, n, n)
        torch.from_numpy(max_out).copy_(self.max)
        torch.from_numpy(mean_out).copy_(mean)


def pool_pattern(pattern: np.ndarray, max_cells: int = MAX_CELLS) -> tuple[np.ndarray, np.ndarray]:
    """Max and mean pooling of a full (..., T, T) pattern into (..., n, n) cells, in numpy: what
    the overview must equal, and how an exported overview of a whole pattern is made."""
    T = pattern.shape[-1]
    w, n = cell_size(T, max_cells), n_cells(T, max_cells)
    padded = np.zeros(pattern.shape[:-2] + (n * w, n * w), dtype=np.float64)
    padded[..., :T, :T] = pattern
    blocks = padded.reshape(pattern.shape[:-2] + (n, w, n, w))  # (..., n, w, n, w)
    counts = cell_counts(T, w)
    mx = blocks.max(axis=(-3, -1))  # probabilities are >= 0, so padding zeros never win
    mean = blocks.sum(axis=(-3, -1)) / (counts[:, None] * counts[None, :])
    return mx, mean
