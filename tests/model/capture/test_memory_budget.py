"""The work bound of a capture on the CPU: attention scores counted by hand (causal, and a
sliding window), the refusal naming the length that fits, and that length then accepted."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.models import session_for
from transformer_viewer.model.capture.memory_budget import attention_scores, check_cpu_work
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.errors import CaptureTooLargeError


def test_attention_scores_count_each_query_against_the_keys_it_sees():
    full = GPTConfig(n_layer=3, n_head=2, n_embd=8, block_size=64, vocab_size=16)
    T = 5
    assert attention_scores(full, T) == 3 * 2 * sum(q + 1 for q in range(T))
    # Window 2: query 0 sees one key, every later query two; layer 1 is a full one.
    sliding = GPTConfig(n_layer=2, n_head=1, n_embd=8, block_size=64, vocab_size=16, sliding_window=2,
                        layer_types=("sliding", "full"))
    assert attention_scores(sliding, T) == (1 + 2 * (T - 1)) + sum(q + 1 for q in range(T))


def test_a_capture_past_the_work_bound_is_refused_with_the_length_that_fits():
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=1 << 20, vocab_size=64, positional="rotary")
    limit = attention_scores(cfg, 30)
    check_cpu_work(cfg, 30, limit)
    with pytest.raises(CaptureTooLargeError, match="shorten the prompt to 30 tokens or fewer"):
        check_cpu_work(cfg, 31, limit)


def test_the_session_refuses_on_the_cpu_before_computing(monkeypatch):
    from transformer_viewer.model.capture import memory_budget
    from transformer_viewer.model.tokenizers.tokenizer import Tokenized

    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=1 << 20, vocab_size=64, positional="rotary")
    session = session_for(GPT(cfg))
    monkeypatch.setattr(memory_budget, "MAX_CPU_ATTENTION_SCORES", attention_scores(cfg, 40))

    def tokens(n):
        ids = tuple(int(i) for i in torch.arange(n) % 60 + 1)
        return Tokenized(ids, tuple("x" for _ in ids), tuple((i, i + 1) for i in range(n)), "x" * n)

    session.set_tokens(tokens(41))
    with pytest.raises(CaptureTooLargeError, match="40 tokens or fewer"):
        session.run()
    session.set_tokens(tokens(40))
    assert session.run().token_ids.shape == (40,)
