"""The model's output read at the end of a run: the next-token distribution at one position,
and every position's log-probability of the token that follows it.

The second needs the whole (T, V) unembedding; it runs over blocks of the vocabulary with a
running log-sum-exp, can be cancelled between blocks, and the window computes it after the
views are drawn.
"""

from __future__ import annotations

import numpy as np
import torch

from transformer_viewer.model.capture.trace import NextToken
from transformer_viewer.model.kernels.vocab_blocks import VOCAB_BLOCK, VocabBlocks, pick, row_blocks

# Positions unembedded together, at most: a (512, 2048) block of logits stays in a core's cache
# through its reductions, which saves more than reading the whole head again for each
# block of positions costs.
ROW_BLOCK = 512


def token_logprobs(model, final: torch.Tensor, ids: torch.Tensor, p: int, n_vocab: int, is_cancelled=None,
                   progress=None):
    """log p(token t | < t) for every t ((T,) numpy, NaN at t = 0), and the logits and
    log-probs at position p ((V,) each); three Nones when `is_cancelled()` turned true.
    `progress(done, total)` hears of the share done after each block, in tokens of the vocabulary.

    final (T, C) is the last residual stream, ids (T,). The (T, V) logits (200 MB at 1024
    tokens) never exist at once: blocks of positions by blocks of the vocabulary, each reduced
    while it is still in cache, with a running log-sum-exp.
    """
    T = final.shape[0]
    h = model.hook_final(model.ln_f(final))  # (T, C)
    V = min(n_vocab, model.lm_head.weight.shape[0])  # padded rows never count
    picked = torch.zeros(T - 1, dtype=torch.float32, device=h.device)  # logit of each position's next token
    lse = torch.empty(T, dtype=torch.float32, device=h.device)
    logits_p = torch.empty(V, dtype=torch.float32, device=h.device)
    cancelled = is_cancelled or (lambda: False)
    if cancelled():
        return None, None, None
    done = 0
    for n0, n1 in row_blocks(T, ROW_BLOCK):
        targets = ids[n0 + 1:n1 + 1]  # the token each of these positions predicts (the last has none)
        blocks = VocabBlocks(model, h[n0:n1], V, VOCAB_BLOCK)
        for v0, v1, block in blocks:  # (n1 - n0, v1 - v0) each
            if n0 <= p < n1:
                logits_p[v0:v1] = block[p - n0]
            pick(picked[n0:n0 + len(targets)], block, targets, v0, v1)
            done += (n1 - n0) * (v1 - v0)
            if progress is not None:
                progress(done // T, V)  # in tokens of the vocabulary, as if all positions went at once
            if cancelled():  # before the next block is computed
                return None, None, None
        lse[n0:n1] = blocks.logsumexp()
    token_lp = torch.full((T,), float("nan"), dtype=torch.float32)
    token_lp[1:] = (picked - lse[:-1]).cpu()
    return token_lp.numpy(), logits_p, logits_p - lse[p]


def position_logits(model, x: torch.Tensor, n_vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(V,) logits and log-probs of one position's final residual stream x (C,)."""
    logits = model.unembed(x).float()[:n_vocab]  # (V,); padded rows never count
    return logits, torch.log_softmax(logits, dim=-1)


def next_token(logits: torch.Tensor, logprobs: torch.Tensor, position: int, top_k: int) -> NextToken:
    """The NextToken of (V,) logits and their log-softmax at `position`, with the top k."""
    k = max(1, min(int(top_k), logits.shape[-1]))
    top = torch.topk(logits, k)
    probs = logprobs.exp()
    return NextToken(
        position=position,
        probs=probs.cpu().numpy().astype(np.float32),
        top_ids=top.indices.cpu().numpy().astype(np.int64),
        top_probs=probs[top.indices].cpu().numpy().astype(np.float32),
        top_logits=top.values.cpu().numpy().astype(np.float32),
    )
