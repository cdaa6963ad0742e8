"""What the patching view reads off a grid: the selection a cell names (key/value heads by their
group's first query head), exact cells written over an estimate, readouts and titles."""

from __future__ import annotations

import numpy as np

from transformer_viewer.model.analysis.patching.grid import PatchGrid
from transformer_viewer.viewer.views.patch_cells import (
    cell_readout,
    grid_title,
    merged,
    metric_line,
    selection_of,
    shortened_pair,
)


def _grid(what="heads", row_axis="layer", col_axis="head", shape=(2, 4), estimate=False, clean=2.0, corrupted=-1.0):
    raw = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 1.0
    return PatchGrid(what, "denoise", "logit( A) - logit( B) at the last position", raw, clean, corrupted,
                     row_axis, col_axis, tuple(str(i) for i in range(shape[0])),
                     tuple(str(i) for i in range(shape[1])), estimate=estimate)


def test_a_cell_selects_its_layer_head_and_position():
    assert selection_of(_grid(), 1, 3, layer=0, n_head=4) == {"layer": 1, "head": 3}
    kv = _grid("k", col_axis="key/value head", shape=(2, 2))  # 8 query heads over 2 key/value heads
    assert selection_of(kv, 1, 1, layer=0, n_head=8) == {"layer": 1, "head": 4}
    resid = _grid("resid", col_axis="position", shape=(3, 5))
    assert selection_of(resid, 2, 4, layer=0, n_head=4) == {"layer": 2, "query": 4}
    by_pos = _grid("heads-by-pos", row_axis="head", col_axis="position", shape=(4, 5))
    assert selection_of(by_pos, 3, 2, layer=1, n_head=4) == {"layer": 1, "head": 3, "query": 2}


def test_exact_cells_over_an_estimate_and_the_readout_beside_it():
    estimate = _grid(estimate=True)
    exact = merged(estimate, {(0, 1): 0.5, (9, 9): 1.0})  # a cell outside the grid is ignored
    assert not exact.estimate
    assert exact.raw[0, 1] == 0.5 and np.isnan(exact.raw).sum() == exact.raw.size - 1
    line = cell_readout(estimate, 0, 1, normalised=True, estimate=estimate, exact=exact)
    assert line.startswith("layer 0 \u00d7 head 1: exact 0.5 normalised")
    assert "estimate 0.3333 normalised, 0 raw" in line
    assert "exact: computing" in cell_readout(estimate, 1, 1, True, estimate=estimate, exact=exact)


def test_titles_and_the_metric_line_say_what_the_numbers_are():
    g = _grid()
    assert "clean 2, corrupted -1" in metric_line(g) and "too close" not in metric_line(g)
    assert "too close" in metric_line(_grid(clean=1.0, corrupted=1.0 + 1e-5))
    title = grid_title(g, "the house of the", "the land of the", normalised=True)
    assert "'the house of the'" in title and "'the land of the'" in title and "corrupted = 0, clean = 1" in title
    assert "pairs from pairs.tsv (averaged)" in grid_title(g, "a", "b", False, "pairs.tsv")
    a, b = shortened_pair("x " * 40 + "John gave", "x " * 40 + "Mary gave")
    assert a.startswith("\u2026") and "John gave" in a and "Mary gave" in b and len(a) < 50
