"""Pooling a long token axis for display keeps every block's extreme and names its token."""

from __future__ import annotations

import numpy as np

from transformer_viewer.viewer.views.decimate import column_blocks, column_labels, pool


def test_blocks_cover_every_token_once():
    for T in (1, 5, 1024, 1025, 8192, 8191):
        cols = column_blocks(T)
        assert cols.n <= 1024 and cols.edges[0] == 0 and cols.edges[-1] == T
        assert np.all(np.diff(cols.edges) >= 1) and cols.pooled == (T > 1024)
        assert cols.column_of(T - 1) == cols.n - 1


def test_pooling_keeps_the_maxima_and_their_tokens():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((3, 8191)).astype(np.float32)
    m[1, 4321] = 40.0
    m[2, 77] = -50.0
    m[0, :9] = np.nan  # a whole block without a value stays empty; a partial one keeps its numbers
    m[0, 10] = np.nan
    cols = column_blocks(8191)
    shown, token = pool(m, cols)
    assert shown.shape == (3, cols.n) and cols.size == 8
    assert np.isnan(shown[0, 0])
    for r in range(3):
        for j in range(1, cols.n):
            a, b = cols.block(j)
            assert shown[r, j] == np.nanmax(m[r, a:b]) and m[r, token[r, j]] == shown[r, j] and a <= token[r, j] < b
    assert token[1, cols.column_of(4321)] == 4321
    signed, at = pool(m, cols, signed=True)
    assert signed[2, cols.column_of(77)] == -50.0 and at[2, cols.column_of(77)] == 77
    assert column_labels(tuple(f"t{i}" for i in range(8191)), cols)[1] == "8–15"


def test_short_axes_are_drawn_as_they_are():
    m = np.arange(12, dtype=np.float32).reshape(2, 6)
    shown, token = pool(m, column_blocks(6))
    np.testing.assert_array_equal(shown, m)
    np.testing.assert_array_equal(token[1], np.arange(6))
    assert column_labels(("a", "b"), column_blocks(2)) == ("a", "b")
