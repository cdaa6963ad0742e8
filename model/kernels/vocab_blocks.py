"""Every logit of a set of residual rows, one block of the vocabulary at a time.

What reads the whole distribution of many rows (each position's log-probability of its next
token, the logit lens) never holds the (N, V) logits: 200 MB at 1,024 tokens and a 49k
vocabulary, 600 MB for a lens of 1,000 rows at 152k. `VocabBlocks` yields one (N, width) block
of logits at a time, still in cache while its reader reduces it, and folds each block's
log-sum-exp into the rows' normaliser as it goes.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from transformer_viewer.model.kernels.linear import Linear, linear

VOCAB_BLOCK = 2048  # vocabulary rows the unembedding computes at once (the packed head is laid out by these blocks too)


def row_blocks(n: int, size: int) -> list[tuple[int, int]]:
    """(first, end) of the blocks of at most `size` rows that n residual rows are unembedded in.
    A lone last row joins the block before it: alone it would get a matrix-vector kernel, which
    rounds its own way. Among two rows or more, oneDNN's product gives a row the same logits
    whichever rows it goes with; torch's own GEMM (MKL) may not for a few rows, and the exp
    and log after it round an element by its place in the tensor, so what reads a row among
    other rows holds it to float32 rounding, not to the bit."""
    starts = list(range(0, n, size))
    if len(starts) > 1 and n - starts[-1] == 1:
        starts.pop()
    return list(zip(starts, starts[1:] + [n], strict=True))


def head_logits(model, h: torch.Tensor, rows: slice | torch.Tensor) -> torch.Tensor:
    """float32 logits of final-norm rows h (N, C) for the head rows `rows` (a slice of the
    vocabulary, or token ids): the head's own kernel, bias and soft-cap, (N, len(rows))."""
    head = model.lm_head
    if isinstance(head, Linear) and isinstance(rows, slice):  # from the head's packed copy of the block, if kept
        logits = head.rows(h, *rows.indices(head.out_features)[:2])
    else:  # the same kernel the head's forward takes: oneDNN's where it is installed, else torch's
        product = linear if isinstance(head, Linear) else F.linear
        logits = product(h, head.weight[rows], None if head.bias is None else head.bias[rows])
    return model.cap_logits(logits).float()


class VocabBlocks:
    """Iterate (v0, v1, logits[:, v0:v1]) over the first `n_vocab` tokens, `width` at a time,
    for final-norm rows h (N, C); after the loop, `logsumexp()` is each row's normaliser (N,)."""

    def __init__(self, model, h: torch.Tensor, n_vocab: int, width: int):
        self.model, self.h, self.n_vocab, self.width = model, h, n_vocab, width
        self.starts = range(0, n_vocab, width)
        self._lse = torch.empty(len(self.starts), h.shape[0], dtype=torch.float32, device=h.device)  # (blocks, N)

    def __iter__(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        for j, v0 in enumerate(self.starts):
            v1 = min(self.n_vocab, v0 + self.width)
            block = head_logits(self.model, self.h, slice(v0, v1))  # (N, v1 - v0)
            # log-sum-exp as x0 - log_softmax(x)0: one fused kernel instead of five passes.
            self._lse[j] = block[:, 0] - torch.log_softmax(block, dim=-1)[:, 0]
            yield v0, v1, block

    def logsumexp(self) -> torch.Tensor:
        """(N,) log of each row's sum of exp(logits) over the vocabulary (once the loop is done)."""
        return torch.logsumexp(self._lse, dim=0)


def pick(out: torch.Tensor, block: torch.Tensor, ids: torch.Tensor, v0: int, v1: int) -> None:
    """out[i] = the logit of token ids[i] in row i, for the rows whose token falls in v0..v1-1."""
    rows = ((ids >= v0) & (ids < v1)).nonzero().squeeze(1)
    out[rows] = block[rows, ids[rows] - v0]
