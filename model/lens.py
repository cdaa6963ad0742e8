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
               step: Callable[[int, int], None] | None = None) -> LogitLens:
    """The lens of `residuals` (default: the session's cached run, see Session.residuals();
    Session.masked_residuals gives those of a masked run) at positions[0]..positions[1]-1
    (default: every position); column j of the result is position positions[0] + j.

    One (P, C) x (C, V) matmul per row and block of POSITION_BLOCK positions, so memory stays
    bounded however long the prompt and large the vocabulary; the padded vocabulary rows beyond
    the tokenizer's are dropped before the softmax, as Session does. `step(done, total)` is
    called after each row (it may raise to stop).
    """
    resid = session.residuals() if residuals is None else list(residuals)
    L = session.config.n_layer
    if len(resid) != L + 1:
        raise ModelError(f"the logit lens needs {L + 1} residual streams (one per layer and the final), got {len(resid)}")
    model, V = session.model, session.n_vocab
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
    # The final row decides what "the model's answer" is, so it goes first.
    order = [L] + list(range(L))
    top_ids = np.empty((R, T), dtype=np.int64)
    top_probs = np.empty((R, T), dtype=np.float32)
    final_ranks = np.empty((R, T), dtype=np.int64)
    final_probs = np.empty((R, T), dtype=np.float32)
    ref_probs = np.empty((R, T), dtype=np.float32)
    for done, row in enumerate(order, 1):
        for p0 in range(0, T, POSITION_BLOCK):
            p1 = min(T, p0 + POSITION_BLOCK)
            x = resid[row][0, a + p0:a + p1]  # (P, C)
            ref = None if reference_ids is None else reference_ids[row, p0:p1]
            cells = _lens_block(model, x, V, top_ids[L, p0:p1] if row != L else None, ref)
            top_ids[row, p0:p1], top_probs[row, p0:p1], final_ranks[row, p0:p1], final_probs[row, p0:p1] = cells[:4]
            if ref is not None:
                ref_probs[row, p0:p1] = cells[4]
        if step is not None:
            step(done, R)
    if reference_ids is None:
        reference_ids, ref_probs = top_ids.copy(), top_probs.copy()
    return LogitLens(
        row_labels=lens_labels(L), top_ids=top_ids, top_probs=top_probs, final_ids=top_ids[L].copy(),
        final_ranks=final_ranks, final_probs=final_probs, reference_ids=reference_ids, reference_probs=ref_probs,
    )


def _lens_block(model, x: torch.Tensor, V: int, final_ids: np.ndarray | None, reference: np.ndarray | None):
    """One row's cells at P positions: (top id, its probability, rank and probability of the
    final top token (`final_ids`; None: this is the final row, its own top), and the
    probability of the `reference` ids)."""
    logits = model.unembed(x)[:, :V].float()  # (P, V)
    logprobs = torch.log_softmax(logits, dim=-1)  # (P, V)
    positions = torch.arange(logits.shape[0], device=logits.device)
    best = logits.argmax(dim=-1)  # (P,)
    final_idx = best if final_ids is None else torch.as_tensor(final_ids, device=logits.device)
    final_logit = logits[positions, final_idx]  # (P,)
    # Rank = how many tokens score strictly higher; ties count in the token's favour.
    out = [best.cpu().numpy(), logprobs[positions, best].exp().cpu().numpy(),
           (logits > final_logit[:, None]).sum(dim=-1).cpu().numpy(),
           logprobs[positions, final_idx].exp().cpu().numpy()]
    if reference is not None:
        out.append(logprobs[positions, torch.as_tensor(reference, device=logits.device)].exp().cpu().numpy())
    return out
