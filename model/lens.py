"""Logit lens: read every layer's residual stream through the final LayerNorm and the unembedding.

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


def lens_labels(n_layer: int) -> tuple[str, ...]:
    return tuple([f"{layer}.pre" for layer in range(n_layer)] + ["final"])


POSITION_BLOCK = 128  # positions unembedded at once: (128, V) logits, 78 MB at a 152k vocabulary


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
    top tokens are copied, and only the positions whose final top token or reference token
    differs from `known`'s are unembedded again (for the rank and probability of the new one).

    One (P, C) x (C, V) matmul per row and block of POSITION_BLOCK positions, so memory stays
    bounded however long the prompt and large the vocabulary; the padded vocabulary rows beyond
    the tokenizer's are dropped before the softmax, as Session does. `step(done, total)` is
    called after each row (it may raise to stop).
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

    def unembed_row(row: int, cols: np.ndarray | None = None) -> None:
        """Fill row `row` at the columns `cols` (default: all), by blocks of positions."""
        cols = np.arange(T) if cols is None else cols
        for p0 in range(0, len(cols), POSITION_BLOCK):
            c = cols[p0:p0 + POSITION_BLOCK]
            contiguous = c[-1] - c[0] == len(c) - 1
            x = resid[row][0, a + c[0]:a + c[-1] + 1] if contiguous else resid[row][0, a + c]  # (P, C)
            ref = None if reference_ids is None else reference_ids[row, c]
            out.put(row, c, _lens_block(session.model, x, session.n_vocab,
                                        out.top_ids[L, c] if row != L else None, ref))

    # The final row decides what "the model's answer" is, so it goes first.
    unembed_row(L)
    done = 1
    if step is not None:
        step(done, R)
    for row in range(L):
        if row < known_rows:
            out.lend(row, known)
            redo = np.flatnonzero(out.final_ids_differ(known) | out.reference_differs(row, known))
            if len(redo):
                unembed_row(row, redo)
        else:
            unembed_row(row)
        done += 1
        if step is not None:
            step(done, R)
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

    def put(self, row: int, cols: np.ndarray, cells) -> None:
        self.top_ids[row, cols], self.top_probs[row, cols] = cells[0], cells[1]
        self.final_ranks[row, cols], self.final_probs[row, cols] = cells[2], cells[3]
        if self.ref_probs is not None:
            self.ref_probs[row, cols] = cells[4]

    def lend(self, row: int, known: LogitLens) -> None:
        """Row `row` from `known`, right wherever final_ids_differ and reference_differs are False."""
        self.top_ids[row], self.top_probs[row] = known.top_ids[row], known.top_probs[row]
        self.final_ranks[row], self.final_probs[row] = known.final_ranks[row], known.final_probs[row]
        if self.reference_ids is not None:
            ref = self.reference_ids[row]
            # known's probability of a token it names: its top token, else its reference token
            self.ref_probs[row] = np.where(ref == known.top_ids[row], known.top_probs[row], known.reference_probs[row])

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


def _lens_block(model, x: torch.Tensor, V: int, final_ids: np.ndarray | None, reference: np.ndarray | None):
    """One row's cells at P positions: (top id, its probability, rank and probability of the
    final top token (`final_ids`; None: this is the final row, its own top), and the
    probability of the `reference` ids), as numpy arrays.

    Probabilities are exp(logit - logsumexp) of the few logits asked for: no (P, V)
    log-softmax is made."""
    logits = model.unembed(x)[:, :V].float()  # (P, V)
    lse = torch.logsumexp(logits, dim=-1)  # (P,)
    best_logit, best = logits.max(dim=-1)  # (P,)
    if final_ids is None:
        final_idx, final_logit = best, best_logit
    else:
        final_idx = torch.as_tensor(final_ids, device=logits.device)
        final_logit = logits.gather(1, final_idx[:, None])[:, 0]  # (P,)
    # Rank = how many tokens score strictly higher; ties count in the token's favour.
    rank = (logits > final_logit[:, None]).sum(dim=-1)
    asked = [best_logit, final_logit]
    if reference is not None:
        asked.append(logits.gather(1, torch.as_tensor(reference, device=logits.device)[:, None])[:, 0])
    probs = (torch.stack(asked) - lse).exp().cpu().numpy()  # (2 or 3, P): one copy off the device
    ids = torch.stack([best, rank]).cpu().numpy()  # (2, P)
    return [ids[0], probs[0], ids[1], probs[1]] + ([probs[2]] if reference is not None else [])
