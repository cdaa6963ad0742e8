"""Level of detail in the attention views, on a session that keeps only pooled overviews: the
heatmap's overview and its zoomed tiles, stale tiles, the grid's thumbnails, the diff, and the
token strip's row."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers.compact import compact_session, no_mask, traced_state
from transformer_viewer.model.capture.on_demand import head_pattern
from transformer_viewer.viewer.views.tile_loader import MAX_TILE, wanted_tile
from transformer_viewer.viewer.worker.inline import InlineWorker
from transformer_viewer.viewer.worker.patterns import PatternTileRequest, handle_tile


@pytest.fixture(scope="module")
def session():
    return compact_session()


@pytest.fixture
def state(session):
    return traced_state(session)


class HeldWorker:
    """Keeps what it is asked; the test answers, in any order, with the session's real tiles."""

    def __init__(self, session):
        self.session, self.asked = session, []

    def submit(self, request, on_result=None, on_failure=None, on_progress=None):
        self.asked.append((request, on_result))

    def answer(self, i: int) -> None:
        from transformer_viewer.viewer.worker.requests import Result

        request, on_result = self.asked[i]
        on_result(Result(request, handle_tile(self.session, request, None, lambda: False)))


def panel_for(qtbot, state, worker):
    from transformer_viewer.viewer.views.attention_panel import AttentionPanel

    panel = AttentionPanel(state, worker)
    qtbot.addWidget(panel)
    panel.resize(700, 640)
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def test_the_heatmap_shows_the_overview_and_a_zoomed_tile_is_the_exact_pattern(qtbot, session, state):
    trace = state.trace
    assert trace.attention is None and trace.overview_cell == 3 and trace.n_tokens == 600
    panel = panel_for(qtbot, state, InlineWorker(session))
    hm = panel.heatmap
    state.set_selection(layer=1, head=2)
    np.testing.assert_array_equal(panel.matrix(), trace.overview_max[1, 2].astype(np.float32))
    assert hm.token_size() == (600, 600) and hm.tile() is None  # the whole prompt: no tile
    assert "max of block query 300..302 x key 0..2" in hm.hover_text(301, 1)
    with qtbot.waitSignal(panel.tiles.tile_drawn, timeout=5000):
        hm.set_visible_tokens((300, 420), (250, 390))
    tile, rows, cols = hm.tile()
    assert rows[0] <= 300 and rows[1] >= 420 and cols[0] <= 250 and cols[1] >= 390
    full = head_pattern(session, trace, 1, 2)
    np.testing.assert_array_equal(tile, full[rows[0]:rows[1], cols[0]:cols[1]])
    assert hm.hover_text(351, 300).endswith(f"(300): {float(full[351, 300]):.3f}")  # exact: no block named
    assert math.isclose(hm.value_at(351, 300)[0], float(full[351, 300])) and hm.value_at(351, 300)[1] == ""
    assert hm.tile_image.isVisible()
    hm.reset_view()  # the whole prompt again: the overview alone
    qtbot.waitUntil(lambda: hm.tile() is None, timeout=5000)


def test_a_stale_tile_is_dropped(qtbot, session, state):
    worker = HeldWorker(session)
    panel = panel_for(qtbot, state, worker)
    hm, tiles = panel.heatmap, panel.tiles
    state.set_selection(layer=1, head=0)
    hm.set_visible_tokens((100, 200), (100, 200))
    qtbot.waitUntil(lambda: len(worker.asked) == 1, timeout=5000)
    state.set_selection(head=3)  # another head while the first tile is computed
    qtbot.waitUntil(lambda: len(worker.asked) == 2, timeout=5000)
    assert (worker.asked[0][0].head, worker.asked[1][0].head) == (0, 3)
    worker.answer(0)
    assert hm.tile() is None and tiles.dropped == 1
    worker.answer(1)
    tile, rows, cols = hm.tile()
    np.testing.assert_array_equal(tile, head_pattern(session, state.trace, 1, 3)[rows[0]:rows[1], cols[0]:cols[1]])


def test_pooling_switch_and_mean_modes(qtbot, session, state):
    panel = panel_for(qtbot, state, InlineWorker(session))
    trace = state.trace
    state.set_selection(layer=0, head=1)
    assert panel.pooling_combo.isVisible()
    panel.set_pooling("mean")
    np.testing.assert_array_equal(panel.matrix(), trace.overview_mean[0, 1].astype(np.float32))
    assert "mean of block" in panel.heatmap.hover_text(10, 4)
    panel.set_pooling("max")
    np.testing.assert_array_equal(panel.matrix(), trace.overview_max[0, 1].astype(np.float32))
    panel.set_mode("layer-mean")
    np.testing.assert_allclose(panel.matrix(), trace.overview_max[0].astype(np.float32).mean(0), rtol=1e-6)
    panel.heatmap.set_visible_tokens((0, 100), (0, 100))
    qtbot.wait(200)
    assert panel.heatmap.tile() is None  # no single head to cut a tile from: the overview stays


def test_wanted_tile_snaps_clamps_and_keeps_the_overview_when_too_much_is_visible():
    assert wanted_tile(((3, 70), (40, 41)), (600, 600), 3) == ((0, 96), (32, 64))
    assert wanted_tile(((590, 600), (0, 10)), (600, 600), 3) == ((576, 600), (0, 32))
    assert wanted_tile(((0, MAX_TILE + 1), (0, 10)), (600, 600), 3) is None
    assert wanted_tile(((0, 10), (0, 10)), (200, 200), 1) is None  # the overview is the pattern


def test_grid_thumbnails_pool_the_full_patterns(qtbot, session, state):
    from transformer_viewer.viewer.views.head_grid import HeadGridView

    grid = HeadGridView(state)
    qtbot.addWidget(grid)
    trace = state.trace
    L, nh, T = 2, 4, trace.n_tokens
    full = np.stack([np.stack([head_pattern(session, trace, la, h) for h in range(nh)]) for la in range(L)])
    block = math.ceil(trace.overview_max.shape[-1] / 64) * trace.overview_cell  # tokens per thumbnail pixel
    S = math.ceil(T / block)
    padded = np.zeros((L, nh, S * block, S * block), dtype=np.float64)
    padded[:, :, :T, :T] = full
    blocks = padded.reshape(L, nh, S, block, S, block)
    counts = np.minimum(block, T - np.arange(S) * block).astype(np.float64)
    np.testing.assert_allclose(grid.thumbnails(), blocks.max(axis=(3, 5)), atol=1e-3)  # float16 overviews
    grid.set_pooling("mean")
    want = blocks.sum(axis=(3, 5)) / np.outer(counts, counts)
    np.testing.assert_allclose(grid.thumbnails(), want, atol=1e-3)


def test_diff_view_and_its_tiles(qtbot, session):
    from transformer_viewer.viewer.views.diff_view import AttentionDiffView

    mask = no_mask(session)
    mask[0, 2] = True
    state = traced_state(session, mask=mask)
    trace, clean = state.trace, state.clean_trace
    view = AttentionDiffView(state, InlineWorker(session))
    qtbot.addWidget(view)
    view.resize(700, 640)
    view.show()
    state.set_selection(layer=1, head=1)
    want = trace.overview_mean[1, 1].astype(np.float32) - clean.overview_mean[1, 1].astype(np.float32)
    np.testing.assert_array_equal(view.matrix(), want)
    assert np.abs(want).max() > 0
    with qtbot.waitSignal(view.tiles.tile_drawn, timeout=5000):
        view.heatmap.set_visible_tokens((200, 300), (100, 200))
    tile, rows, cols = view.heatmap.tile()
    diff = head_pattern(session, trace, 1, 1) - head_pattern(session, clean, 1, 1)
    np.testing.assert_array_equal(tile, diff[rows[0]:rows[1], cols[0]:cols[1]])


def test_token_strip_fetches_the_query_row(qtbot, session, state):
    from transformer_viewer.viewer.views.token_strip import TokenStrip, chip_values

    strip = TokenStrip(state, InlineWorker(session))
    qtbot.addWidget(strip)
    state.set_selection(layer=1, head=3, query=450)
    values, legend = chip_values(state, "attention", strip._fetched_row())
    row = head_pattern(session, state.trace, 1, 3)[450]
    np.testing.assert_array_equal(values[:451], row[:451])
    assert np.isnan(values[451:]).all() and "max" in legend
    top = int(np.argmax(row))
    assert tuple(strip.canvas.colors[top]) != (238, 238, 238)  # the strongest key is coloured
    assert tuple(strip.canvas.colors[500]) == (238, 238, 238)  # a future key is not


def test_a_tile_request_names_its_source(session, state):
    trace = state.trace
    got = handle_tile(session, PatternTileRequest(run_id=trace.run_id, layer=0, head=1, rows=(5, 9), cols=(0, 7)),
                      None, lambda: False)
    assert got.source == ("tile", trace.run_id, 0, 1)


def test_png_and_svg_export_what_is_visible(qtbot, session, state, tmp_path):
    import re
    import xml.etree.ElementTree as ET

    from PySide6 import QtGui

    from transformer_viewer.viewer.export import export_view

    panel = panel_for(qtbot, state, InlineWorker(session))
    state.set_selection(layer=1, head=2)
    with qtbot.waitSignal(panel.tiles.tile_drawn, timeout=5000):
        panel.heatmap.set_visible_tokens((300, 340), (280, 320))
    image = QtGui.QImage(export_view(panel, tmp_path / "zoom.png"))
    assert image.width() == panel.heatmap.graphics.width()
    svg = ET.parse(export_view(panel, tmp_path / "zoom.svg")).getroot()
    texts = "".join(t.text or "" for t in svg.iter() if t.tag.endswith("text"))
    labelled = {int(n) for n in re.findall(r"(\d+):", texts)}
    assert labelled and min(labelled) >= 270 and max(labelled) <= 350  # the zoomed axes, not the whole prompt


def test_shift_click_marks_a_key_column_at_any_zoom(qtbot, session, state):
    from PySide6 import QtCore

    panel = panel_for(qtbot, state, InlineWorker(session))
    hm = panel.heatmap
    hm.set_visible_tokens((200, 260), (150, 210))
    QtCore.QCoreApplication.processEvents()
    pos = hm.graphics.mapFromScene(hm.cell_scene_pos(230, 171))
    with qtbot.waitSignal(hm.key_clicked, timeout=2000) as sig:
        qtbot.mouseClick(hm.graphics.viewport(), QtCore.Qt.MouseButton.LeftButton,
                         QtCore.Qt.KeyboardModifier.ShiftModifier, pos)
    assert sig.args == [171] and hm.highlighted_col() == 171
    assert hm._col_box.rect() == QtCore.QRectF(171, 0, 1, 600)  # the whole column, zoomed or not
    assert state.query_index == 599  # Shift+click left the query where it was
    state.set_selection(head=3)
    assert hm.highlighted_col() == 171 and hm._col_box.isVisible()


def test_matrix_export_of_a_pooled_overview_labels_its_blocks(qtbot, session, state, tmp_path):
    from transformer_viewer.viewer.export import export_view, read_csv_matrix

    panel = panel_for(qtbot, state, InlineWorker(session))
    state.set_selection(layer=0, head=3)
    values, rows, cols = read_csv_matrix(export_view(panel, tmp_path / "overview.csv"))
    np.testing.assert_allclose(values, state.trace.overview_max[0, 3].astype(np.float32), rtol=1e-6)
    assert rows[:2] == ["0..2", "3..5"] and cols[-1] == "597..599" and len(rows) == 200


def test_with_full_patterns_tiles_and_export_come_from_them(qtbot):
    from tests.helpers.compact import LONG
    from tests.helpers.models import scaled_init_loaded
    from transformer_viewer.viewer.worker.handlers import WorkerSession

    full_session = WorkerSession(scaled_init_loaded(LONG, seed=3), keep_full=True)
    state = traced_state(full_session)
    trace = state.trace
    assert trace.attention is not None and trace.overview_cell == 3
    worker = HeldWorker(full_session)  # asked nothing: the tiles are cut from the trace
    panel = panel_for(qtbot, state, worker)
    state.set_selection(layer=1, head=0)
    np.testing.assert_array_equal(panel.matrix(), trace.attention[1, 0].astype(np.float32))
    assert panel.row_labels() == trace.labels
    with qtbot.waitSignal(panel.tiles.tile_drawn, timeout=5000):
        panel.heatmap.set_visible_tokens((40, 90), (10, 60))
    tile, rows, cols = panel.heatmap.tile()
    np.testing.assert_array_equal(tile, trace.attention[1, 0, rows[0]:rows[1], cols[0]:cols[1]].astype(np.float32))
    assert worker.asked == []


def test_a_diff_tile_widens_the_diverging_levels_it_would_saturate(qtbot):
    from transformer_viewer.viewer.views.zoom_heatmap import ZoomHeatmap

    hm = ZoomHeatmap()
    qtbot.addWidget(hm)
    hm.set_data(np.full((4, 4), 0.01, dtype=np.float32), cell=3, levels=None, diverging=True)
    assert hm.levels() == pytest.approx((-0.01, 0.01))
    hm.set_tile(np.array([[0.2, -0.5]], dtype=np.float32), (1, 2), (3, 5))
    assert hm.levels() == pytest.approx((-0.5, 0.5)) and hm.tile_image.getLevels() == pytest.approx((-0.5, 0.5))
