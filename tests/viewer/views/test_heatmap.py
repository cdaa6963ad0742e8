"""HeatmapView: orientation (row = query, row 0 on top), hover readout, click, log scale, ticks."""

import numpy as np
import pytest
from PySide6 import QtCore, QtGui

from transformer_viewer.viewer.views.heatmap import HeatmapView, format_value, get_colormap
from transformer_viewer.viewer.views.token_axis import nice_step

LABELS = ("The", "\u00b7cat", "\u00b7sat", "\u00b7on", "\u00b7the", "\u00b7mat")


@pytest.fixture
def view(qtbot):
    w = HeatmapView()
    qtbot.addWidget(w)
    w.resize(700, 640)
    w.show()
    qtbot.waitExposed(w)
    return w


def asymmetric(T=6):
    """Causal pattern whose every cell differs from its transpose: row 0 is all on key 0."""
    rng = np.random.default_rng(0)
    m = np.tril(rng.random((T, T)) + 0.05).astype(np.float32)
    return m / m.sum(axis=1, keepdims=True)


def viewport_pixel(w: HeatmapView, row: int, col: int) -> QtGui.QColor:
    QtCore.QCoreApplication.processEvents()
    img = w.graphics.viewport().grab().toImage()
    p = w.graphics.mapFromScene(w.cell_scene_pos(row, col))
    return img.pixelColor(p.x(), p.y())


def close_colour(a: QtGui.QColor, b: QtGui.QColor, tol=12) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a.getRgb()[:3], b.getRgb()[:3], strict=True))


def test_image_data_is_row_major_with_row_zero_on_top(view):
    m = asymmetric()
    view.set_data(m, LABELS, LABELS)
    assert view.image.axisOrder == "row-major"
    np.testing.assert_array_equal(view.image.image, m)  # image[r, c] is matrix[r, c]: no transpose
    assert view.view.yInverted()
    top = view.cell_scene_pos(0, 0)
    bottom = view.cell_scene_pos(5, 0)
    right = view.cell_scene_pos(0, 5)
    assert top.y() < bottom.y()  # row 0 is drawn above row 5
    assert right.x() > top.x()  # keys run left to right
    np.testing.assert_array_equal(view.matrix(), m)


def test_drawn_pixels_follow_rows_as_queries(view):
    m = np.zeros((6, 6), dtype=np.float32)
    m[:, 0] = 1.0  # every query looks at key 0: a bright first column, not a bright first row
    m[0, 0] = 1.0
    view.set_data(m, LABELS, LABELS, levels=(0, 1), colormap="viridis")
    cmap = get_colormap("viridis")
    hi, lo = cmap.map(1.0, mode="qcolor"), cmap.map(0.0, mode="qcolor")
    assert close_colour(viewport_pixel(view, 5, 0), hi)  # bottom-left cell: query 5 -> key 0
    assert close_colour(viewport_pixel(view, 0, 5), lo)  # top-right cell: query 0 -> key 5
    assert close_colour(viewport_pixel(view, 3, 3), lo)


def test_hover_text_for_a_known_cell(view, qtbot):
    m = np.zeros((6, 6), dtype=np.float32)
    m[5, 4] = 0.431
    view.set_data(m, ("a", "b", "c", "d", "the", "cat"), ("a", "b", "c", "d", "the", "cat"))
    assert view.hover_text(5, 4) == "query 'cat' (5) -> key 'the' (4): 0.431"
    assert view.hover_text(6, 0) == ""
    with qtbot.waitSignal(view.hover_text_changed, timeout=2000) as sig:
        view.graphics.scene().sigMouseMoved.emit(view.cell_scene_pos(5, 4))
    assert sig.args == ["query 'cat' (5) -> key 'the' (4): 0.431"]
    assert view.hover_label.text() == "query 'cat' (5) -> key 'the' (4): 0.431"


def test_real_mouse_move_updates_readout(view, qtbot):
    view.set_data(asymmetric(), LABELS, LABELS)
    pos = view.graphics.mapFromScene(view.cell_scene_pos(3, 1))
    qtbot.mouseMove(view.graphics.viewport(), pos)
    qtbot.waitUntil(lambda: view.hover_label.text().startswith("query '\u00b7on' (3) -> key '\u00b7cat' (1): "), timeout=2000)


def test_click_emits_the_query_row(view, qtbot):
    view.set_data(asymmetric(), LABELS, LABELS)
    pos = view.graphics.mapFromScene(view.cell_scene_pos(4, 2))
    with qtbot.waitSignal(view.cell_clicked, timeout=2000) as sig:
        qtbot.mouseClick(view.graphics.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=pos)
    assert sig.args == [4, 2]


def test_log_scale_shows_log10_with_fixed_levels(view):
    m = asymmetric()
    m[3, 3] = 0.0
    view.set_data(m, LABELS, LABELS, log_scale=True)
    assert view.log_scale()
    assert view.levels() == pytest.approx((-4.0, 0.0))
    shown = view.image.image
    assert shown[3, 3] == pytest.approx(-4.0)  # zero is clipped to the floor, never -inf
    assert shown[0, 0] == pytest.approx(np.log10(m[0, 0]))
    np.testing.assert_array_equal(view.matrix(), m)  # export still writes probabilities
    view.set_log_scale(False)
    assert view.levels() == pytest.approx((0.0, 1.0))
    np.testing.assert_array_equal(view.image.image, m)


def test_levels_are_fixed_not_auto(view):
    m = asymmetric() * 0.1  # a faint head must look faint
    view.set_data(m, LABELS, LABELS)
    assert view.levels() == pytest.approx((0.0, 1.0))


def test_diverging_levels_are_symmetric(view):
    m = np.array([[-0.2, 0.5], [0.1, 0.0]], dtype=np.float32)
    view.set_data(m, ("a", "b"), ("a", "b"), levels=None, diverging=True)
    assert view.levels() == pytest.approx((-0.5, 0.5))
    assert view.colormap_name() == "CET-D1"
    view.set_data(np.zeros((2, 2), dtype=np.float32), ("a", "b"), ("a", "b"), levels=None, diverging=True)
    lo, hi = view.levels()
    assert lo == -hi and hi > 0  # an all-zero difference shows the neutral middle colour


def test_highlight_and_reset(view):
    view.set_data(asymmetric(), LABELS, LABELS)
    view.highlight_row(2)
    assert view.highlighted_row() == 2 and view._row_box.isVisible()
    assert view._row_box.rect() == QtCore.QRectF(0, 2, 6, 1)
    view.highlight_row(None)
    assert not view._row_box.isVisible()
    view.view.setRange(xRange=(1, 2), yRange=(1, 2), padding=0)
    view.reset_view()
    (x0, x1), (y0, y1) = view.view.viewRange()
    assert (x0, x1) == pytest.approx((0, 6), abs=0.05) and (y0, y1) == pytest.approx((0, 6), abs=0.05)


def test_unknown_colormap_is_one_line(view):
    with pytest.raises(ValueError, match="unknown colormap 'nope'"):
        view.set_colormap("nope")


def test_dense_ticks_thin_out_and_zoom_restores_them(view):
    T = 512
    labels = tuple(f"t{i}" for i in range(T))
    view.set_data(np.eye(T, dtype=np.float32), labels, labels)
    QtCore.QCoreApplication.processEvents()
    step, shown = view._left.visible_ticks()
    assert step > 1 and 0 < len(shown) < T
    view.view.setRange(xRange=(100, 110), yRange=(100, 110), padding=0)
    QtCore.QCoreApplication.processEvents()
    step, shown = view._left.visible_ticks()
    assert step == 1 and set(range(101, 109)) <= set(shown)
    step, shown = view._bottom.visible_ticks()
    assert step == 1 and set(range(101, 109)) <= set(shown)


def test_unchanged_labels_do_not_rebuild_ticks(view):
    view.set_data(asymmetric(), LABELS, LABELS)
    assert view._left.set_labels(LABELS) is False
    assert view._left.set_labels(LABELS[::-1]) is True


@pytest.mark.parametrize("x, step", [(0.3, 1), (1.0, 1), (1.5, 2), (3, 5), (7, 10), (11, 20), (45, 50)])
def test_nice_step(x, step):
    assert nice_step(x) == step


def test_format_value():
    assert format_value(0.4312) == "0.431"
    assert format_value(0.0) == "0.000"
    assert format_value(-0.25) == "-0.250"
    assert format_value(1e-5) == "1.00e-05"


def test_only_the_names_pyqtgraph_lists_are_colormaps(view, tmp_path):
    """pg.colormap.get also reads any file a path names (/dev/zero never ends, a pipe blocks):
    a path is refused unread, every listed name is taken."""
    import os

    import pyqtgraph as pg

    fifo = tmp_path / "map.csv"
    os.mkfifo(fifo)
    for name in ("../../../../../../dev/zero", str(fifo), "/etc/hostname"):
        with pytest.raises(ValueError, match="unknown colormap"):
            view.set_colormap(name)
    for name in pg.colormap.listMaps():
        view.set_colormap(name)
        assert view.colormap_name() == name
