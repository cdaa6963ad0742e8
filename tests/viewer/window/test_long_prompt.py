"""The window, whose worker session keeps only pooled overviews: a 16k-token prompt loads, zooms (a
full-resolution tile arrives and is drawn) and toggles a head (bench/gui_stalls.py measures how
long the GUI thread stalls meanwhile); and the selected head's full pattern exports as .npy
through the worker."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.window import PROMPT, make_checkpoint, new_window, wait_idle
from transformer_viewer.model.capture.on_demand import head_pattern, pattern_tile

LONG_T = 16384


@pytest.fixture(scope="module")
def long_ckpt(tmp_path_factory) -> str:
    # Rotary positions: a 16k context needs no position table; one layer of two heads keeps the
    # forwards short.
    return make_checkpoint(tmp_path_factory.mktemp("long") / "long.safetensors", block_size=LONG_T, n_layer=1,
                           n_head=2, n_embd=16, positional="rotary")


def worker_session(window):
    return window.worker.worker.session  # read only while the worker is idle


@pytest.mark.slow
def test_a_16k_token_prompt_loads_zooms_and_toggles(qtbot, tmp_path, long_ckpt):
    words = " ".join(f"w{i % 997}" for i in range(LONG_T))  # two tokens a word: cut to the context
    window = new_window(qtbot, tmp_path, long_ckpt, prompt=None)
    st = window.state
    st.set_prompt(words)
    wait_idle(qtbot, window, lambda: st.trace is not None)
    trace = st.trace
    assert trace.n_tokens == LONG_T and trace.attention is None and trace.overview_cell == LONG_T // 256
    panel, hm = window.attention, window.attention.heatmap
    st.set_selection(layer=0, head=1)
    assert hm.token_size() == (LONG_T, LONG_T) and panel.matrix().shape == (256, 256)
    with qtbot.waitSignal(panel.tiles.tile_drawn, timeout=60000):
        hm.set_visible_tokens((9000, 9300), (8800, 9100))
    tile, rows, cols = hm.tile()
    wait_idle(qtbot, window)
    np.testing.assert_array_equal(tile, pattern_tile(worker_session(window), trace, 0, 1, rows, cols))

    st.toggle_head(0, 0)
    wait_idle(qtbot, window, lambda: st.trace.mask[0, 0])
    masked = st.trace
    assert masked.run_id != trace.run_id and window.head_grid.mask()[0, 0]
    qtbot.waitUntil(lambda: hm.tile() is not None, timeout=60000)  # the zoom asks the new run for its tile
    wait_idle(qtbot, window)
    tile, rows, cols = hm.tile()
    np.testing.assert_array_equal(tile, pattern_tile(worker_session(window), masked, 0, 1, rows, cols))
    window.close()


def test_the_selected_head_s_full_pattern_exports_as_npy(qtbot, tmp_path, tiny_ckpt):
    from transformer_viewer.viewer.window.pattern_export import export_pattern

    window = new_window(qtbot, tmp_path, tiny_ckpt, prompt=PROMPT)
    st = window.state
    assert st.trace.attention is None
    st.set_selection(layer=1, head=2)
    out = tmp_path / "head.npy"
    handle = export_pattern(window, str(out))
    wait_idle(qtbot, window, lambda: handle.done)
    np.testing.assert_array_equal(np.load(out), head_pattern(worker_session(window), st.trace, 1, 2))
    assert export_pattern(window, str(tmp_path / "head.png")) is None
    assert "written as .npy" in window.last_error
    window.close()
