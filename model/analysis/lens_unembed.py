"""The logit lens's unembedding: many residual rows through the final norm and the head at once,
over blocks of the vocabulary, keeping per row only what the lens reports.

A lens of a large model is bound by reading the head, not by arithmetic: at a 152k vocabulary
and width 896 the head is 545 MB, and unembedding one layer's 37 positions at a time reads all
of it for 37 rows, once per layer. Here every layer's rows go through each block of the head
while it is in cache, and each (N, block) slice of logits is reduced at once: its max and
argmax, its log-sum-exp (combined over blocks at the end), the count of logits above each row's
final-token logit, and the logits of the asked tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.kernels.vocab_blocks import VocabBlocks, head_logits, pick, row_blocks

# A block of logits is reduced in four passes after the product that makes it (log-softmax,
# max, the rank's comparison and count), so it should stay in a core's cache: a (512, 4096)
# block is 8 MB, against 32 MB for (2,048, 4,096), and the passes from cache save more than
# each block of rows reading the whole head again costs. The vocabulary's blocks are the same
# however many rows ask: a row's log-sum-exp sums the same blocks in the same order. It is
# still not bit for bit the same among other rows: torch's elementwise exp and log take a vector
# or a scalar kernel by an element's place in the tensor, an ulp apart (so the lens lends a
# clean row's cells rather than unembedding its position again; model/analysis/lens.py).
VOCAB_BLOCK = 4096  # vocabulary rows of the head read at once
ROW_BLOCK = 512  # residual rows unembedded together, at most


@dataclass(frozen=True)
class RowCells:
    """Per residual row: its top token and probability, the rank and probability of the final
    top token asked about, and the probability of the reference token (NaN when none asked)."""

    top_ids: np.ndarray  # (N,) int64
    top_probs: np.ndarray  # (N,) float32
    final_ranks: np.ndarray  # (N,) int64
    final_probs: np.ndarray  # (N,) float32
    reference_probs: np.ndarray  # (N,) float32


@torch.inference_mode()
def lens_cells(model, x: torch.Tensor, n_vocab: int, final_ids: np.ndarray | None = None,
               reference: np.ndarray | None = None,
               step: Callable[[int, int], None] | None = None) -> RowCells:
    """The cells of N residual rows x (N, C). `final_ids` (N,): the token whose rank and
    probability each row reports; None: each row's own top token (rank 0, the final row).
    `reference` (N,): a token whose probability each row reports. Only the first `n_vocab`
    logits count (padded vocabulary rows never do). `step(done, total)` after each block of
    the head (it may raise to stop)."""
    N = x.shape[0]
    parts = []
    blocks = row_blocks(N, ROW_BLOCK)
    n_blocks = -(-n_vocab // VOCAB_BLOCK) * len(blocks)
    done = 0

    def counted():
        nonlocal done
        done += 1
        if step is not None:
            step(done, n_blocks)

    for n0, n1 in blocks:
        parts.append(_cells(model, x[n0:n1], n_vocab, None if final_ids is None else final_ids[n0:n1],
                            None if reference is None else reference[n0:n1], VOCAB_BLOCK, counted))
    return RowCells(*(np.concatenate(a) for a in zip(*parts, strict=True)))


def _cells(model, x: torch.Tensor, V: int, final_ids, reference, width: int, counted):
    h = model.hook_final(model.ln_f(x))  # (N, C)
    N, dev = h.shape[0], h.device
    best = torch.full((N,), float("-inf"), device=dev)  # running max logit
    best_id = torch.zeros(N, dtype=torch.long, device=dev)
    asked = {"final": final_ids, "reference": reference}
    asked = {k: torch.as_tensor(v, device=dev) for k, v in asked.items() if v is not None}
    picked = {k: torch.zeros(N, device=dev) for k in asked}  # each asked token's logit
    rank = torch.zeros(N, dtype=torch.long, device=dev)
    if "final" in asked:
        # The final tokens' logits before the pass, for the counts; from the same GEMM kernel
        # on the gathered head rows (each row's own column is checked again below).
        uniq, inverse = torch.unique(asked["final"], return_inverse=True)
        threshold = head_logits(model, h, uniq).gather(1, inverse[:, None])[:, 0]  # (N,)
    blocks = VocabBlocks(model, h, V, width)
    for v0, v1, block in blocks:  # (N, v1 - v0) each
        top, arg = block.max(dim=1)
        better = top > best  # strictly: the first of equal maxima wins, as argmax
        best_id = torch.where(better, arg + v0, best_id)
        best = torch.where(better, top, best)
        if "final" in asked:
            rank += count_above(block, threshold)
        for k, ids in asked.items():
            pick(picked[k], block, ids, v0, v1)
        counted()
    lse = blocks.logsumexp()  # (N,)
    if "final" in asked:
        # Rank = how many tokens score strictly higher; ties count in the token's favour. A
        # final token whose logit in the pass came out above its threshold counted itself.
        rank -= (picked["final"] > threshold).long()
        final_logit = picked["final"]
    else:
        final_logit = best
    probs = (torch.stack([best, final_logit, picked.get("reference", torch.full_like(best, float("nan")))])
             - lse).exp().cpu().numpy()  # (3, N): one copy off the device
    ids = torch.stack([best_id, rank]).cpu().numpy()  # (2, N)
    return ids[0], probs[0], ids[1], probs[1], probs[2]


def count_above(block: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """(N,) int32: how many of row n's logits in `block` (N, width) are above threshold[n].

    Summed as bytes into int32: the sum of a bool tensor runs torch's generic reduction to
    int64 (about 2 ns a logit on the CPU, as long as the product that made the block), the
    bytes' sum a vectorized one (about 0.2 ns). A block is VOCAB_BLOCK wide: no overflow."""
    return torch.gt(block, threshold[:, None]).view(torch.uint8).sum(dim=1, dtype=torch.int32)
