"""Logits by blocks of the vocabulary (model/kernels/vocab_blocks.py) against the decoder's plain
unembedding: each block is that slice of `GPT.unembed`'s logits, the folded log-sum-exp is the
whole row's, and `pick` takes each row's own token; on the plain model and on the installed one."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.models import tiny_gpt
from tests.helpers.tolerances import assert_float32_close
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.kernels.inference import install_inference
from transformer_viewer.model.kernels.vocab_blocks import VocabBlocks, head_logits, pick, row_blocks

CAPPED = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=5000, logit_softcap=30.0)


@pytest.mark.parametrize("installed", [False, True], ids=["plain", "installed"])
def test_blocks_of_logits_are_the_unembeddings_slices_and_fold_its_normaliser(installed):
    model = tiny_gpt(CAPPED, seed=1)
    if installed:
        install_inference(model)
    h = torch.randn(7, CAPPED.n_embd, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        want = model.cap_logits(model.lm_head(h)).float()  # (7, V): the plain unembedding after ln_f
        blocks = VocabBlocks(model, h, n_vocab=4500, width=1024)  # the last 500 rows of the head unread
        seen = []
        for v0, v1, block in blocks:
            seen.append((v0, v1))
            # Another GEMM shape than the whole head's: the float32 rule, not the bits.
            assert_float32_close(block, want[:, v0:v1], reduction=CAPPED.n_embd, scale=30.0, what=f"block {v0}:{v1}")
        lse = blocks.logsumexp()
    assert seen == [(0, 1024), (1024, 2048), (2048, 3072), (3072, 4096), (4096, 4500)]
    assert_float32_close(lse, torch.logsumexp(want[:, :4500], dim=-1), reduction=4500, scale=30.0, what="log-sum-exp")


def test_logits_of_chosen_tokens_and_pick_agree_with_the_whole_row():
    model = tiny_gpt(CAPPED, seed=3)
    h = torch.randn(5, CAPPED.n_embd, generator=torch.Generator().manual_seed(4))
    ids = torch.tensor([3, 4999, 1024, 0, 2047])
    with torch.inference_mode():
        want = model.cap_logits(model.lm_head(h)).float()
        chosen = head_logits(model, h, ids)  # (5, 5): each row against the five tokens' head rows
        out = torch.full((5,), float("nan"))
        for v0, v1, block in VocabBlocks(model, h, CAPPED.vocab_size, 2048):
            pick(out, block, ids, v0, v1)
    assert_float32_close(chosen, want[:, ids], reduction=CAPPED.n_embd, scale=30.0, what="chosen tokens' logits")
    assert_float32_close(out, want[torch.arange(5), ids], reduction=CAPPED.n_embd, scale=30.0, what="picked logits")


def test_a_lone_last_row_joins_the_block_before_it():
    assert row_blocks(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert row_blocks(9, 4) == [(0, 4), (4, 9)]  # one row alone would get a matrix-vector kernel
    assert row_blocks(1, 4) == [(0, 1)]
