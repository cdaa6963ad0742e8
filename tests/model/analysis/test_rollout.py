"""Attention rollout: one layer without the residual term is its heads' mean pattern; rows sum to
1; rows computed on demand equal the rows of the whole product, written here with numpy from the
captured patterns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_session
from transformer_viewer.model.analysis.rollout import rollout_rows
from transformer_viewer.model.decoder.hooks import caching
from transformer_viewer.model.errors import ModelError


def _patterns(s) -> list[np.ndarray]:
    """Every layer's whole pattern (nh, T, T), float64, from a hooked forward."""
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(s.config.n_layer)]
    with torch.no_grad(), caching(s.model, names) as acts:
        s.model.run_blocks(s.model.embed(torch.tensor([s.tokens.ids])))
    return [acts[n][0].double().numpy() for n in names]


def _full_rollout(patterns, layers, combine, residual) -> np.ndarray:
    T = patterns[0].shape[-1]
    out = np.eye(T)
    for layer in range(*layers):
        a = combine(patterns[layer])
        if residual:
            a = 0.5 * a + 0.5 * np.eye(T)
        a = a / a.sum(axis=-1, keepdims=True)
        out = a @ out  # the later layer on the left: row q of A_b ... A_a
    return out


def test_one_layer_without_the_residual_is_its_mean_pattern():
    s = tiny_session()
    pats = _patterns(s)
    T = len(s.tokens.ids)
    got = rollout_rows(s, 0, T, layers=(0, 1), residual=False)
    np.testing.assert_allclose(got.rows, pats[0].mean(axis=0), atol=1e-6)
    assert got.layers == (0, 1) and got.heads == "mean" and not got.residual


@pytest.mark.parametrize("heads, combine", [
    ("mean", lambda p: p.mean(axis=0)),
    ("max", lambda p: p.max(axis=0)),
])
@pytest.mark.parametrize("residual", [True, False])
def test_rows_on_demand_equal_rows_of_the_whole_product(heads, combine, residual):
    s = tiny_session()
    T = len(s.tokens.ids)
    expected = _full_rollout(_patterns(s), (0, s.config.n_layer), combine, residual)
    for first, stop in [(0, T), (3, 7), (T - 1, T)]:
        got = rollout_rows(s, first, stop, heads=heads, residual=residual)
        np.testing.assert_allclose(got.rows, expected[first:stop], atol=1e-5)
        np.testing.assert_allclose(got.rows.sum(axis=-1), 1.0, atol=1e-5)
        assert got.rows.shape == (stop - first, T) and got.first == first


def test_a_subset_of_heads_and_a_layer_range():
    s = tiny_session()
    T = len(s.tokens.ids)
    pats = _patterns(s)
    heads = [(1, 0), (1, 2)]
    got = rollout_rows(s, 2, T, layers=(1, 2), heads=heads, residual=True)
    a = 0.5 * pats[1][[0, 2]].mean(axis=0) + 0.5 * np.eye(T)
    a /= a.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(got.rows, a[2:T], atol=1e-6)
    assert got.heads == "1.0,1.2"


def test_a_masked_run_rolls_out_its_own_patterns():
    s = tiny_session()
    T = len(s.tokens.ids)
    mask = np.zeros((2, 4), dtype=bool)
    mask[0] = True  # layer 1's patterns read a residual stream without layer 0's heads
    clean = rollout_rows(s, 0, T, layers=(1, 2))
    masked = rollout_rows(s, 0, T, layers=(1, 2), mask=mask)
    assert np.abs(clean.rows - masked.rows).max() > 1e-4


def test_bad_requests_are_one_line():
    s = tiny_session()
    T = len(s.tokens.ids)
    with pytest.raises(ModelError, match="outside the prompt"):
        rollout_rows(s, 0, T + 1)
    with pytest.raises(ModelError, match="not a range"):
        rollout_rows(s, 0, 1, layers=(1, 1))
    with pytest.raises(ModelError, match="head 5.0 is not in this model"):
        rollout_rows(s, 0, 1, heads=[(5, 0)])
    with pytest.raises(ModelError, match="needs a chosen head"):
        rollout_rows(s, 0, 1, heads=[(1, 0)], residual=False)
