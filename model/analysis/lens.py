"""Logit lens: read every layer's residual stream through the final norm and the unembedding.

Rows are the resid_pre of each layer and the final resid_post (the model's own output), so the
last row is exactly the model's prediction. For each row and position we keep the top token, its
probability, and the rank and probability of the model's final top token at that position: how
early in depth the answer appears. A `reference_ids` grid makes the lens also report the
probability of given tokens (the clean run's top tokens), which is how the diff view compares a
masked run with the clean one without keeping (rows, T, 50257) probabilities around.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.analysis.lens_unembed import RowCells, lens_cells
from transformer_viewer.model.errors import ModelError


@dataclass(frozen=True)
class LogitLens:
    row_labels: tuple[str, ...]  # "0.pre", ..., "{L-1}.pre", "final"
    top_ids: np.ndarray  # (R, T) int64, the lens's most likely token per row and position
    top_probs: np.ndarray  # (R, T) float32
    final_ids: np.ndarray  # (T,) int64, the model's final top token at each position (= top_ids[-1])
    final_ranks: np.ndarray  # (R, T) int64, rank of final_ids[t] in row r (0 = top)
    final_probs: np.ndarray  # (R, T) float32, probability of final_ids[t] in row r
    reference_ids: np.ndarray  # (R, T) int64, the tokens reference_probs is about (default top_ids)
    reference_probs: np.ndarray  # (R, T) float32

    @property
    def n_rows(self) -> int:
        return int(self.top_ids.shape[0])

    @property
    def n_tokens(self) -> int:
        return int(self.top_ids.shape[1])

    def columns(self, a: int, b: int) -> LogitLens:
        """Columns a..b-1 of this lens."""
        return LogitLens(self.row_labels, *(np.array(x[..., a:b]) for x in self._arrays()))

    def then(self, other: LogitLens) -> LogitLens:
        """This lens with `other`'s columns after its own (the lens of the joined positions)."""
        return LogitLens(self.row_labels, *(np.concatenate([x, y], axis=-1)
                                            for x, y in zip(self._arrays(), other._arrays(), strict=True)))

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (self.top_ids, self.top_probs, self.final_ids, self.final_ranks, self.final_probs,
                self.reference_ids, self.reference_probs)


def lens_labels(n_layer: int) -> tuple[str, ...]:
    return tuple([f"{layer}.pre" for layer in range(n_layer)] + ["final"])


@torch.inference_mode()
def logit_lens(session, residuals: list[torch.Tensor] | None = None,
               reference_ids: np.ndarray | None = None, positions: tuple[int, int] | None = None,
               step: Callable[[int, int], None] | None = None, known: LogitLens | None = None,
               known_rows: int = 0) -> LogitLens:
    """The lens of `residuals` (default: the session's cached run, see Session.residuals();
    Session.masked_residuals gives those of a masked run) at positions[0]..positions[1]-1
    (default: every position); column j of the result is position positions[0] + j.

    `known`, a lens over the same positions whose first `known_rows` rows were read from the
    same residual streams (the clean lens, for a mask whose first masked layer is
    known_rows - 1: a head in layer l changes resid_pre of l + 1 on), lends those rows: their
    cells are copied, and only the positions whose final top token or reference token differs
    from `known`'s are unembedded again, for the rank and probability of the new one alone.

    The final row is unembedded first (it names each position's final top token), then every
    other row at once, over blocks of the vocabulary (model/analysis/lens_unembed.py), so memory stays
    bounded however long the prompt and large the vocabulary; the padded vocabulary rows beyond
    the tokenizer's never count, as in Session. `step(done, total)` reports progress in rows
    (it may raise to stop).
    """
    resid = session.residuals() if residuals is None else list(residuals)
    L = session.config.n_layer
    if len(resid) != L + 1:
        raise ModelError(f"the logit lens needs {L + 1} residual streams (one per layer and the final), got {len(resid)}")
    n_pos = int(resid[0].shape[1])
    a, b = (0, n_pos) if positions is None else (int(positions[0]), int(positions[1]))
    if not 0 <= a < b <= n_pos:
        raise ModelError(f"lens positions {a}..{b - 1} are outside the prompt's {n_pos} tokens")
    T = b - a
    R = L + 1
    if reference_ids is not None:
        reference_ids = np.asarray(reference_ids, dtype=np.int64)
        if reference_ids.shape != (R, T):
            raise ModelError(f"reference_ids has shape {reference_ids.shape}; the lens has ({R}, {T})")
    known_rows = 0 if known is None else min(int(known_rows), L)  # the final row is never lent
    if known is not None and known.top_ids.shape != (R, T):
        raise ModelError(f"the known lens has shape {known.top_ids.shape}; this one has ({R}, {T})")
    out = _Cells(R, T, reference_ids)
    model, V = session.model, session.n_vocab
    every = np.arange(T)

    # The final row decides what "the model's answer" is, so it goes first.
    out.put(L, every, lens_cells(model, resid[L][0, a:b], V, reference=out.reference(L, every)))
    if step is not None:
        step(1, R)
    wanted: list[tuple[int, np.ndarray]] = []  # (row, columns) still to unembed
    for row in range(L):
        if row < known_rows:
            out.lend(row, known)
            redo = np.flatnonzero(out.final_ids_differ(known) | out.reference_differs(row, known))
            if len(redo):
                wanted.append((row, redo))
        else:
            wanted.append((row, every))
    if wanted:
        x = torch.cat([resid[row][0, a:b] if len(cols) == T else resid[row][0, a + cols] for row, cols in wanted])
        final_ids = out.top_ids[L]
        refs = None if reference_ids is None else np.concatenate([out.reference(row, cols) for row, cols in wanted])
        cells = lens_cells(model, x, V, np.concatenate([final_ids[cols] for _row, cols in wanted]), refs,
                           step=None if step is None else lambda d, n: step(1 + (R - 1) * d // n, R))
        n0 = 0
        for row, cols in wanted:
            part = slice(n0, n0 + len(cols))
            if row < known_rows:
                out.put_asked(row, cols, cells, part, known)
            else:
                out.put(row, cols, cells, part)
            n0 += len(cols)
    elif step is not None:
        step(R, R)
    return out.lens(L)


class _Cells:
    """The lens's (R, T) arrays while they are filled."""

    def __init__(self, R: int, T: int, reference_ids: np.ndarray | None):
        self.top_ids = np.empty((R, T), dtype=np.int64)
        self.top_probs = np.empty((R, T), dtype=np.float32)
        self.final_ranks = np.empty((R, T), dtype=np.int64)
        self.final_probs = np.empty((R, T), dtype=np.float32)
        self.reference_ids = reference_ids
        self.ref_probs = None if reference_ids is None else np.empty((R, T), dtype=np.float32)

    def reference(self, row: int, cols: np.ndarray) -> np.ndarray | None:
        return None if self.reference_ids is None else self.reference_ids[row, cols]

    def put(self, row: int, cols: np.ndarray, cells: RowCells, part: slice = slice(None)) -> None:
        """Row `row` at columns `cols` from `cells[part]`."""
        self.top_ids[row, cols], self.top_probs[row, cols] = cells.top_ids[part], cells.top_probs[part]
        self.final_ranks[row, cols], self.final_probs[row, cols] = cells.final_ranks[part], cells.final_probs[part]
        if self.ref_probs is not None:
            self.ref_probs[row, cols] = cells.reference_probs[part]

    def lend(self, row: int, known: LogitLens) -> None:
        """Row `row` from `known`, right wherever final_ids_differ and reference_differs are False."""
        self.top_ids[row], self.top_probs[row] = known.top_ids[row], known.top_probs[row]
        self.final_ranks[row], self.final_probs[row] = known.final_ranks[row], known.final_probs[row]
        if self.reference_ids is not None:
            ref = self.reference_ids[row]
            # known's probability of a token it names: its top token, else its reference token
            self.ref_probs[row] = np.where(ref == known.top_ids[row], known.top_probs[row], known.reference_probs[row])

    def put_asked(self, row: int, cols: np.ndarray, cells: RowCells, part: slice, known: LogitLens) -> None:
        """Row `row`, lent from `known`, at columns `cols` unembedded again for a final or
        reference token `known` does not name: only those tokens' cells come from `cells[part]`.
        The lent top token and probabilities stay `known`'s: the same residual row unembedded
        among other rows can round an ulp apart (an elementwise exp or log may take a vector
        or a scalar kernel by the element's place in the tensor), and a lent row must show
        exactly the clean numbers."""
        new_final = self.final_ids_differ(known)[cols]
        self.final_ranks[row, cols[new_final]] = cells.final_ranks[part][new_final]
        self.final_probs[row, cols[new_final]] = cells.final_probs[part][new_final]
        if self.ref_probs is not None:
            new_ref = self.reference_differs(row, known)[cols]
            self.ref_probs[row, cols[new_ref]] = cells.reference_probs[part][new_ref]

    def final_ids_differ(self, known: LogitLens) -> np.ndarray:
        return self.top_ids[-1] != known.final_ids

    def reference_differs(self, row: int, known: LogitLens) -> np.ndarray:
        if self.reference_ids is None:
            return np.zeros(self.top_ids.shape[1], dtype=bool)
        ref = self.reference_ids[row]
        return (ref != known.top_ids[row]) & (ref != known.reference_ids[row])

    def lens(self, L: int) -> LogitLens:
        if self.reference_ids is None:  # the lens's own top tokens
            reference_ids, ref_probs = self.top_ids.copy(), self.top_probs.copy()
        else:
            reference_ids, ref_probs = self.reference_ids, self.ref_probs
        return LogitLens(
            row_labels=lens_labels(L), top_ids=self.top_ids, top_probs=self.top_probs,
            final_ids=self.top_ids[L].copy(), final_ranks=self.final_ranks, final_probs=self.final_probs,
            reference_ids=reference_ids, reference_probs=ref_probs,
        )

