"""Token axes too long to draw one column per token: pool blocks of neighbouring tokens into
one display column.

A screen has about a thousand columns of pixels, so a matrix over 8k tokens is drawn pooled:
each display column shows the largest value of its block of tokens (with `signed`, the value of
largest magnitude, sign kept, for the diverging diff maps), so a spike at a single token stays
visible however far the view is zoomed out. Each pooled cell also remembers which token its
value came from: a click or a hover names that token, not the block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_COLUMNS = 1024  # more columns than a wide screen has pixels for a heatmap


@dataclass(frozen=True)
class Columns:
    """Display column j covers tokens edges[j] .. edges[j + 1] - 1."""

    edges: np.ndarray  # (n + 1,) int64
    size: int  # tokens per block (the last block may be shorter)

    @property
    def n(self) -> int:
        return len(self.edges) - 1

    @property
    def pooled(self) -> bool:
        return self.size > 1

    def block(self, column: int) -> tuple[int, int]:
        return int(self.edges[column]), int(self.edges[column + 1])

    def column_of(self, token: int) -> int:
        return min(int(token) // self.size, self.n - 1)


def column_blocks(n_tokens: int, max_columns: int = MAX_COLUMNS) -> Columns:
    """Equal blocks of ceil(T / max_columns) tokens (one token each when T fits)."""
    size = max(1, -(-int(n_tokens) // max_columns))
    edges = np.append(np.arange(0, n_tokens, size, dtype=np.int64), np.int64(n_tokens))
    return Columns(edges, size)


def pool(m: np.ndarray, cols: Columns, signed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(pooled, token): `m` (R, T) pooled to (R, n) by the block maximum (`signed`: the value
    of largest magnitude), and for each pooled cell the token it was taken from (NaN cells
    lose to any number; an all-NaN block stays NaN)."""
    m = np.asarray(m, dtype=np.float32)
    R, T = m.shape
    if not cols.pooled:
        return m, np.broadcast_to(np.arange(T, dtype=np.int64), (R, T))
    n, size = cols.n, cols.size
    padded = np.full((R, n * size), np.nan, dtype=np.float32)
    padded[:, :T] = m
    blocks = padded.reshape(R, n, size)  # (R, n, size)
    key = np.abs(blocks) if signed else blocks
    key = np.where(np.isnan(key), -np.inf, key)
    at = key.argmax(axis=2)  # (R, n), position inside the block
    pooled = np.take_along_axis(blocks, at[:, :, None], axis=2)[:, :, 0]  # (R, n)
    return pooled, cols.edges[:-1][None, :] + at


def column_labels(labels, cols: Columns) -> tuple[str, ...]:
    """A label per display column: the token's own, or the range of positions a block covers."""
    if not cols.pooled:
        return tuple(labels)
    return tuple(f"{a}–{b - 1}" for a, b in zip(cols.edges[:-1].tolist(), cols.edges[1:].tolist(), strict=True))
