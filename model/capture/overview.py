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

from transformer_viewer.model.kernels.attention_kernels import LARGEST_BLOCK

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


class PoolScratch:
    """One flat buffer, grown when asked for more, that the poolers of one capture share."""

    def __init__(self):
        self._flat: torch.Tensor | None = None

    def get(self, n: int, like: torch.Tensor) -> torch.Tensor:
        f = self._flat
        if f is None or f.numel() < n or f.dtype != like.dtype or f.device != like.device:
            self._flat = f = like.new_empty(n)
        return f[:n]


class OverviewPooler:
    """Accumulates one layer's overview from the blocks of pattern rows the attention computes.

    `__call__(first_row, rows)` takes rows (B, nh, r, b) of query rows first_row.. against keys
    0..b-1, every later key being in the future for these rows (batch element 0 is pooled);
    `finish(max_out, mean_out)` writes (nh, n, n) results (`mean_out` may be `max_out` itself
    when a cell is one token).
    """

    def __init__(self, n_head: int, T: int, device, max_cells: int = MAX_CELLS, out: np.ndarray | None = None,
                 scratch: PoolScratch | None = None, mean_out: np.ndarray | None = None):
        self.T = T
        # With both outputs given, the overview is written there as soon as the last block of
        # rows has passed and the float32 sums are freed: a capture then holds one layer's
        # sums at a time, not every layer's (75 MB of GPT-2-small's 1,024-token capture).
        self._outs = (out, mean_out) if out is not None and mean_out is not None else None
        self.finished = False
        self.cell = cell_size(T, max_cells)
        self.n = n_cells(T, max_cells)
        # With one token per cell the overview is the pattern: on the CPU its rows go straight
        # into `out` (the trace's (nh, n, n) array, any float dtype), with no sums and no
        # float32 copy in between; `finish` then has nothing left to write.
        self.direct = torch.from_numpy(out) if out is not None and self.cell == 1 and torch.device(device).type == "cpu" \
            else None
        # float32 accumulators, made at the first block: a capture makes every layer's pooler
        # before the forward, and only the layer running needs them.
        self._shape, self._device = (n_head, self.n, self.n), device
        self.max: torch.Tensor | None = None
        self.sum: torch.Tensor | None = None
        # Row-pooled max and sum of one block, in a buffer reused from block to block (fresh
        # ones, half a megabyte each at 1,024 tokens, are page-faulted in every time) and shared
        # by the layers' poolers, which never run at once.
        self.scratch = scratch if scratch is not None else PoolScratch()

    def _make_accumulators(self) -> None:
        if self.max is None and self.direct is None:
            self.max = torch.zeros(self._shape, dtype=torch.float32, device=self._device)
            self.sum = torch.zeros(self._shape, dtype=torch.float32, device=self._device) if self.cell > 1 else None

    def _row_pooled(self, shape: tuple[int, int, int], like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two (nh, k, b) buffers for a block's row-pooled max and sum."""
        n = math.prod(shape)
        # Sized for the largest block at once (k <= LARGEST_BLOCK / cell rows, b <= T): grown block by
        # block it would be reallocated at every block.
        flat = self.scratch.get(2 * max(n, shape[0] * -(-LARGEST_BLOCK // self.cell) * self.T), like)
        return flat[:n].view(shape), flat[n:2 * n].view(shape)

    def __call__(self, first_row: int, rows: torch.Tensor) -> None:
        rows = rows[0]  # (nh, r, b)
        r, b = rows.shape[1], rows.shape[2]
        if self.direct is not None:
            self.direct[:, first_row:first_row + r, :b] = rows
            self.direct[:, first_row:first_row + r, b:] = 0  # the future
        else:
            self._make_accumulators()
            self._pool(first_row, rows)
        if self._outs is not None and first_row + r == self.T:
            self.finish(*self._outs)

    def _pool(self, first_row: int, rows: torch.Tensor) -> None:
        w, r, b = self.cell, rows.shape[1], rows.shape[2]
        if w == 1:  # one token per cell: the overview is the pattern itself
            self.max[:, first_row:first_row + r, :b] = rows
            return
        # Rows are pooled first: the reduction runs along whole contiguous key rows (vectorized),
        # and the column pooling then sees w times fewer numbers. The rows split into the
        # whole row cells inside this block, written once, and the cut cells at either end,
        # which the neighbouring block completes.
        a, e = first_row, first_row + r
        lo = min(-(-a // w) * w, e)  # first row of a whole cell
        hi = max(e // w * w, lo)  # end of the last whole cell
        if hi > lo:
            k = (hi - lo) // w
            body = rows[:, lo - a:hi - a].unflatten(1, (k, w))  # (nh, k, w, b), a view
            row_max, row_sum = self._row_pooled((rows.shape[0], k, b), rows)
            torch.amax(body, dim=2, out=row_max)
            torch.sum(body, dim=2, out=row_sum)
            self._pool_columns(lo // w, row_max, row_sum, whole=True)
        for r0, r1 in ((a, lo), (hi, e)):
            if r1 > r0:
                part = rows[:, r0 - a:r1 - a]  # (nh, r1 - r0, b), inside one row cell
                self._pool_columns(r0 // w, part.amax(dim=1, keepdim=True), part.sum(dim=1, keepdim=True),
                                   whole=False)

    def _pool_columns(self, cell: int, row_max: torch.Tensor, row_sum: torch.Tensor, whole: bool) -> None:
        """Pool (nh, k, b) row-pooled values over column cells into row cells cell..cell+k-1:
        written directly when these row cells are wholly in this block, else accumulated."""
        w = self.cell
        k, b = row_max.shape[1], row_max.shape[2]
        full = b // w  # column cells wholly inside the visible keys
        cells = slice(cell, cell + k)
        acc_max, acc_sum = self.max[:, cells], self.sum[:, cells]  # (nh, k, n) views
        if full:
            body_max = row_max[..., : full * w].unflatten(-1, (full, w))  # (nh, k, full, w)
            body_sum = row_sum[..., : full * w].unflatten(-1, (full, w))
            if whole:
                torch.amax(body_max, dim=-1, out=acc_max[..., :full])
                torch.sum(body_sum, dim=-1, out=acc_sum[..., :full])
            else:
                m = acc_max[..., :full]
                torch.maximum(m, body_max.amax(dim=-1), out=m)
                acc_sum[..., :full] += body_sum.sum(dim=-1)
        if b > full * w:  # the column cell the visible keys end in
            tail_max = row_max[..., full * w:].amax(dim=-1)  # (nh, k)
            tail_sum = row_sum[..., full * w:].sum(dim=-1)
            if whole:
                acc_max[..., full] = tail_max
                acc_sum[..., full] = tail_sum
            else:
                m = acc_max[..., full]
                torch.maximum(m, tail_max, out=m)
                acc_sum[..., full] += tail_sum

    def finish(self, max_out: np.ndarray, mean_out: np.ndarray) -> None:
        """Write the (nh, n, n) max and mean into the given arrays (any float dtype), once;
        the pooler's own float32 arrays are freed."""
        if self.finished:
            return
        self.finished = True
        self._make_accumulators()
        self._finish(max_out, mean_out)
        self.max = self.sum = None

    def _finish(self, max_out: np.ndarray, mean_out: np.ndarray) -> None:
        same = np.may_share_memory(mean_out, max_out)  # one array for both (a cell is one token)
        if self.direct is not None:
            for out in (max_out,) if same else (max_out, mean_out):
                if not np.may_share_memory(out, self.direct.numpy()):
                    torch.from_numpy(out).copy_(self.direct)
            return
        torch.from_numpy(max_out).copy_(self.max)
        if same:
            return
        if self.cell == 1:  # the mean of one token is the token
            torch.from_numpy(mean_out).copy_(self.max)
            return
        counts = torch.from_numpy(cell_counts(self.T, self.cell)).to(self.sum)  # (n,)
        mean = self.sum.div_(counts[:, None] * counts[None, :])  # (nh, n, n)
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
