"""The model's output read at the end of a run: the next-token distribution at one position,
and every position's log-probability of the token that follows it.

The second needs the whole (T, V) unembedding; it runs over blocks of the vocabulary with a
running log-sum-exp, can be cancelled between blocks, and the window computes it after the
views are drawn.
"""

from __future__ import annotations

import numpy as np
import torch

from transformer_viewer.model.trace import NextToken
from transformer_viewer.model.vocab_blocks import VocabBlocks, pick

VOCAB_BLOCK = 2048  # vocabulary rows the unembedding computes at once


def token_logprobs(model, final: torch.Tensor, ids: torch.Tensor, p: int, n_vocab: int, is_cancelled=None,
                   progress=None):
    """log p(token t | < t) for every t ((T,) numpy, NaN at t = 0), and the logits and
    log-probs at position p ((V,) each); three Nones when `is_cancelled()` turned true.
    `progress(done, total)` hears of each block of the vocabulary done.

    final (T, C) is the last residual stream, ids (T,). The (T, V) logits (200 MB at 1024
    tokens) never exist at once, and a (T, 2048) block still in cache when it is reduced makes
    the whole thing about a third faster than one GEMM.
    """
    T = final.shape[0]
    h = model.hook_final(model.ln_f(final))  # (T, C)
    V = min(n_vocab, model.lm_head.weight.shape[0])  # padded rows never count
    targets = ids[1:]  # (T-1,), the token each position predicts
    picked = torch.zeros(T - 1, dtype=torch.float32, device=h.device)  # logit of each target
    logits_p = torch.empty(V, dtype=torch.float32, device=h.device)
    blocks = VocabBlocks(model, h, V, VOCAB_BLOCK)
    cancelled = is_cancelled or (lambda: False)
    if cancelled():
        return None, None, None
    for v0, v1, block in blocks:  # (T, v1 - v0) each
        logits_p[v0:v1] = block[p]
        pick(picked, block, targets, v0, v1)
        if progress is not None:
            progress(v1, V)
        if cancelled():  # before the next block is computed
            return None, None, None
    lse = blocks.logsumexp()  # (T,)
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
