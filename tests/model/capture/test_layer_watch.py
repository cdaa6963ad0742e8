"""A watched forward stops inside a layer: at its residual stream's midpoint and at each block
of query rows its attention computes, not only where the next layer begins."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.models import tiny_loaded
from transformer_viewer.model.capture.layer_watch import attention_watch
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.hooks import count_hooks
from transformer_viewer.model.errors import Cancelled
from transformer_viewer.model.kernels.attention_kernels import query_blocks
from transformer_viewer.model.tokenizers.tokenizer import Tokenized

CONFIG = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=512, vocab_size=50257)
T = 300  # more than one block of query rows


def session() -> Session:
    s = Session(tiny_loaded(CONFIG, seed=3))
    ids = tuple(int(i) for i in np.random.default_rng(0).integers(0, 1000, T))
    s.set_tokens(Tokenized(ids, tuple("t" for _ in ids), tuple((i, i + 1) for i in range(T)), "t" * T))
    return s


class Polls:
    """is_cancelled() that turns true at its `at`-th call, and counts every call."""

    def __init__(self, at: int):
        self.at, self.n = at, 0

    def __call__(self) -> bool:
        self.n += 1
        return self.n >= self.at


def test_a_capture_polls_at_each_block_of_query_rows_and_stops_there():
    blocks = len(query_blocks(T))
    assert blocks >= 2
    full = Polls(at=10 ** 9)
    session().run(is_cancelled=full, logprobs=False)
    # Per layer: its start, each block of query rows, its midpoint.
    assert full.n == CONFIG.n_layer * (blocks + 2)
    s = session()
    clean = s.run()
    s.set_tokens(s.tokens)  # forget the cache: the next run computes every layer again
    seen, polls = [], Polls(at=3)  # layer 0's start, its first block of rows, then cancelled at the second
    with pytest.raises(Cancelled):
        s.run(progress=lambda layer, n: seen.append(layer), is_cancelled=polls)
    assert polls.n == 3 and seen == [0] and count_hooks(s.model) == 0
    np.testing.assert_array_equal(s.run().overview_max, clean.overview_max)  # nothing half-done remains


def test_a_prediction_stops_inside_attention_too():
    s = session()
    s.run()
    mask = np.zeros((CONFIG.n_layer, CONFIG.n_head), dtype=bool)
    mask[0, 1] = True
    polls = Polls(at=2)  # layer 0's start, then its first block of query rows
    with pytest.raises(Cancelled):
        s.predict(mask, update_cache=False, is_cancelled=polls)
    assert polls.n == 2 and count_hooks(s.model) == 0


def test_attention_watch_checks_then_passes_the_rows_on():
    got = []
    watched = attention_watch(range(3), lambda: False, {1: lambda a, rows: got.append((a, rows))})
    assert sorted(watched) == [0, 1, 2]
    watched[0](0, "rows0")
    watched[1](128, "rows1")
    assert got == [(128, "rows1")]
    stop = attention_watch(range(1), lambda: True, {})
    with pytest.raises(Cancelled):
        stop[0](0, "rows")
    observers = {0: lambda a, rows: None}
    assert attention_watch(range(1), None, observers) is observers  # nothing to watch: as they were
