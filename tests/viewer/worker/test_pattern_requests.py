"""The worker's full-resolution attention requests: a tile of one head's pattern and one head's
whole pattern streamed to .npy, both recomputed for the trace they name."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.interventions import ablating
from tests.helpers.models import scaled_init_loaded
from transformer_viewer.model.capture.on_demand import head_pattern, pattern_tile
from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.worker.handlers import WorkerSession, handle_trace
from transformer_viewer.viewer.worker.patterns import (
    PatternExportRequest,
    PatternTileRequest,
    handle_export,
    handle_tile,
)
from transformer_viewer.viewer.worker.requests import Cancelled, TraceRequest

PROMPT = "The cat sat on the mat because the cat was tired, and the dog barked at the cat all night"


def _no_progress(*_a):
    pass


@pytest.fixture()
def traced():
    session = WorkerSession(scaled_init_loaded(seed=4))
    mask = np.zeros((2, 4), dtype=bool)
    mask[0, 1] = True
    result = handle_trace(session, TraceRequest(text=PROMPT, intervention=ablating(mask)), _no_progress, lambda: False)
    return session, result


def test_a_tile_is_the_named_trace_s_pattern(traced):
    session, result = traced
    T = result.trace.n_tokens
    for trace in (result.trace, result.clean):
        req = PatternTileRequest(run_id=trace.run_id, layer=1, head=2, rows=(3, T), cols=(1, T - 2))
        got = handle_tile(session, req, _no_progress, lambda: False)
        want = pattern_tile(session, trace, 1, 2, (3, T), (1, T - 2))
        np.testing.assert_array_equal(got.tile, want)
        assert (got.run_id, got.layer, got.head, got.rows) == (trace.run_id, 1, 2, (3, T))
    masked = handle_tile(session, PatternTileRequest(run_id=result.trace.run_id, layer=1, head=0, rows=(0, T),
                                                     cols=(0, T)), _no_progress, lambda: False).tile
    clean = handle_tile(session, PatternTileRequest(run_id=result.clean.run_id, layer=1, head=0, rows=(0, T),
                                                    cols=(0, T)), _no_progress, lambda: False).tile
    assert np.abs(masked - clean).max() > 1e-4  # layer 0's masked head reaches layer 1: the runs differ
    with pytest.raises(ModelError, match="no longer the worker's"):
        handle_tile(session, PatternTileRequest(run_id=-1, layer=0, head=0, rows=(0, 1), cols=(0, 1)),
                    _no_progress, lambda: False)


def test_export_streams_one_head_and_cancels_cleanly(traced, tmp_path):
    session, result = traced
    out = tmp_path / "head.npy"
    seen = []
    req = PatternExportRequest(run_id=result.trace.run_id, layer=1, head=3, path=str(out))
    assert handle_export(session, req, lambda *a: seen.append(a), lambda: False) == str(out)
    np.testing.assert_array_equal(np.load(out), head_pattern(session, result.trace, 1, 3))
    assert seen and seen[-1][0] == seen[-1][1] == result.trace.n_tokens
    with pytest.raises(Cancelled):
        handle_export(session, PatternExportRequest(run_id=result.trace.run_id, layer=1, head=3,
                                                    path=str(tmp_path / "c.npy")), _no_progress, lambda: True)
    assert sorted(os.listdir(tmp_path)) == ["head.npy"]
    with pytest.raises(ModelError, match="cannot write"):
        handle_export(session, PatternExportRequest(run_id=result.trace.run_id, layer=1, head=3,
                                                    path=str(tmp_path / "missing" / "x.npy")),
                      _no_progress, lambda: False)
