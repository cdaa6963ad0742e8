"""Logit lens: read every layer's residual stream through the final LayerNorm and the unembedding.

Rows are the resid_pre of each layer and the final resid_post (the model's own output), so the
last row is exactly the model's prediction. For each row and position we keep the top token, its
probability, and the rank and probability of the model's final top token at that position: how
early in depth the answer appears. A `reference_ids` grid makes the lens also report the
probability of given tokens (the clean run's top tokens), which is how the diff view compares a
masked run with the clean one without keeping (rows, T, 50257) probabilities around.
"""

from __future__ import annotations

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


@torch.inference_mode()
def logit_lens(session, residuals: list[torch.Tensor] | None = None,
               reference_ids: np.ndarray | None = None) -> LogitLens:
    """The lens of `residuals` (default: the session's cached run, see Session.residuals();
    Session.masked_residuals gives those of a masked run).

    One (T, C) x (C, V) matmul per row; the padded vocabulary rows beyond the tokenizer's
    are dropped before the softmax, as Session does.
    """
    resid = session.residuals() if residuals is None else list(residuals)
    L = session.config.n_layer
    if len(resid) != L + 1:
        raise ModelError(f"the logit lens needs {L + 1} residual streams (one per layer and the final), got {len(resid)}")
    model, V = session.model, session.n_vocab
    T = int(resid[0].shape[1])
    R = L + 1
    if reference_ids is not None:
        reference_ids = np.asarray(reference_ids, dtype=np.int64)
        if reference_ids.shape != (R, T):
            raise ModelError(f"reference_ids has shape {reference_ids.shape}; the lens has ({R}, {T})")
    device = resid[0].device
    # The final row decides what "the model's answer" is, so it goes first.
    order = [L] + list(range(L))
    top_ids = np.empty((R, T), dtype=np.int64)
    top_probs = np.empty((R, T), dtype=np.float32)
    final_ranks = np.empty((R, T), dtype=np.int64)
    final_probs = np.empty((R, T), dtype=np.float32)
    ref_probs = np.empty((R, T), dtype=np.float32)
    positions = torch.arange(T, device=device)
    final_idx = None
    for row in order:
        logits = model.unembed(resid[row][0])[:, :V].float()  # (T, V)
        logprobs = torch.log_softmax(logits, dim=-1)  # (T, V)
        best = logits.argmax(dim=-1)  # (T,)
        if final_idx is None:
            final_idx = best
        top_ids[row] = best.cpu().numpy()
        top_probs[row] = logprobs[positions, best].exp().cpu().numpy()
        final_logit = logits[positions, final_idx]  # (T,)
        # Rank = how many tokens score strictly higher; ties count in the token's favour.
        final_ranks[row] = (logits > final_logit[:, None]).sum(dim=-1).cpu().numpy()
        final_probs[row] = logprobs[positions, final_idx].exp().cpu().numpy()
        if reference_ids is not None:
            ref = torch.as_tensor(reference_ids[row], device=device)
            ref_probs[row] = logprobs[positions, ref].exp().cpu().numpy()
    if reference_ids is None:
        reference_ids, ref_probs = top_ids.copy(), top_probs.copy()
    return LogitLens(
        row_labels=lens_labels(L), top_ids=top_ids, top_probs=top_probs, final_ids=top_ids[L].copy(),
        final_ranks=final_ranks, final_probs=final_probs, reference_ids=reference_ids, reference_probs=ref_probs,
    )
