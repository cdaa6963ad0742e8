"""HeadGridView: thumbnails per layer x head, max-pooled, masked heads marked, click opens a head."""

import numpy as np
import pytest
from PySide6 import QtCore

from transformer_viewer.viewer.views.head_grid import THUMB, HeadGridView, max_pool, tile


def patterns(L=3, nh=4, T=10):
    rng = np.random.default_rng(1)
    a = np.tril(rng.random((L, nh, T, T)) + 0.01)
    return (a / a.sum(-1, keepdims=True)).astype(np.float16)


@pytest.fixture
def grid(qtbot):
    g = HeadGridView()
    qtbot.addWidget(g)
    g.resize(520, 420)
    g.show()
    qtbot.waitExposed(g)
    return g


def test_max_pool_keeps_sharp_peaks():
    a = np.zeros((1, 1, 1024, 1024), dtype=np.float16)
    a[0, 0, 700, 3] = 1.0
    pooled = max_pool(a)
    assert pooled.shape == (1, 1, THUMB, THUMB)
    assert pooled[0, 0, 700 // 16, 0] == 1.0 and pooled.sum() == 1.0


def test_max_pool_uneven_and_small():
    a = np.arange(2 * 3 * 100 * 100, dtype=np.float32).reshape(2, 3, 100, 100)
    pooled = max_pool(a, 64)
    assert pooled.shape == (2, 3, 50, 50)
    assert pooled[1, 2, 0, 0] == a[1, 2, :2, :2].max()
    small = np.ones((1, 1, 5, 5), dtype=np.float32)
    assert max_pool(small).shape == (1, 1, 5, 5)


def test_tile_places_each_head_in_its_cell():
    thumbs = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    img, P = tile(thumbs)
    for layer in range(2):
        for head in range(3):
            np.testing.assert_array_equal(img[layer * P: layer * P + 4, head * P: head * P + 4], thumbs[layer, head])
    assert np.isnan(img[4:P, :]).all()  # the gap is empty


def test_click_emits_layer_and_head(grid, qtbot):
    grid.set_patterns(patterns(), np.zeros((3, 4), dtype=bool))
    QtCore.QCoreApplication.processEvents()
    pos = grid.graphics.mapFromScene(grid.head_scene_pos(2, 1))
    with qtbot.waitSignal(grid.head_activated, timeout=2000) as sig:
        qtbot.mouseClick(grid.graphics.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=pos)
    assert sig.args == [2, 1]
    assert grid.head_at(grid.head_scene_pos(0, 3)) == (0, 3)


def test_masked_heads_are_marked(grid):
    mask = np.zeros((3, 4), dtype=bool)
    mask[1, 2] = mask[2, 0] = True
    grid.set_patterns(patterns(), mask)
    np.testing.assert_array_equal(grid.mask(), mask)
    fill = grid.marks.fill.path()
    centre = lambda layer, head: grid.view.mapSceneToView(grid.head_scene_pos(layer, head))  # noqa: E731
    assert fill.contains(centre(1, 2)) and fill.contains(centre(2, 0))
    assert not fill.contains(centre(0, 0))
    grid.set_mask(np.zeros((3, 4), dtype=bool))
    assert grid.marks.fill.path().isEmpty() and grid.marks.crosses.path().isEmpty()
    with pytest.raises(ValueError):
        grid.set_mask(np.zeros((2, 2), dtype=bool))


def test_selected_frame_and_hover(grid, qtbot):
    grid.set_patterns(patterns(), None)
    grid.set_selected(1, 3)
    assert grid.selected() == (1, 3) and grid.marks.frame.isVisible()
    assert grid.marks.frame.rect().contains(grid.view.mapSceneToView(grid.head_scene_pos(1, 3)))
    grid.set_mask(np.eye(3, 4, dtype=bool))
    with qtbot.waitSignal(grid.hover_text_changed, timeout=2000) as sig:
        grid.graphics.scene().sigMouseMoved.emit(grid.head_scene_pos(1, 1))
    assert sig.args[0].startswith("layer 1 head 1 (masked)")


def test_thumbnails_are_what_is_drawn(grid):
    a = patterns(T=300)
    grid.set_patterns(a)
    thumbs = grid.thumbnails()
    assert thumbs.shape[2] <= THUMB
    np.testing.assert_array_equal(thumbs, max_pool(a))
    assert grid.matrix().shape == a.shape


def test_log_scale(grid):
    grid.set_patterns(patterns())
    grid.set_log_scale(True)
    assert grid.levels() == pytest.approx((-4.0, 0.0))
    thumbs = grid.thumbnails()
    S = thumbs.shape[2]
    # each pixel is its log10 placed on the fixed levels: -4 -> colour 0, 0 -> colour 254
    want = np.round((np.log10(np.maximum(thumbs[1, 2], 1e-4)) + 4.0) / 4.0 * 254)
    P = grid.image.image.shape[0] // thumbs.shape[0]
    np.testing.assert_array_equal(grid.image.image[P:P + S, 2 * P:2 * P + S], want)


def test_the_grid_is_drawn_as_colour_indices_on_fixed_levels_with_transparent_gaps(grid):
    from transformer_viewer.viewer.views.heatmap_parts import get_colormap
    from transformer_viewer.viewer.views.thumbnails import GAP_INDEX, colour_table, tile_indexed

    a = patterns()
    a[0, 1] = np.nan  # a head without a pattern is drawn as a gap, not as a colour
    grid.set_patterns(a)
    img = grid.image.image
    assert img.dtype == np.uint8 and grid.image.levels is None
    want, P = tile_indexed(grid.thumbnails(), (0.0, 1.0))
    np.testing.assert_array_equal(img, want)
    S = grid.thumbnails().shape[2]
    assert (img[:S, P:P + S] == GAP_INDEX).all() and (img[:, S:P] == GAP_INDEX).all()
    assert img[:S, :S].max() < GAP_INDEX
    ramp, _P = tile_indexed(np.linspace(0, 1, 255, dtype=np.float32).reshape(1, 1, 1, 255), (0.0, 1.0))
    np.testing.assert_array_equal(ramp[0, :255], np.arange(255))  # levels 0..1 span the colours exactly
    table = colour_table(get_colormap("viridis"))
    assert table[GAP_INDEX, 3] == 0 and (table[:GAP_INDEX, 3] == 255).all()
    np.testing.assert_array_equal(grid.image.lut, table)
    grid.set_colormap("magma")
    np.testing.assert_array_equal(grid.image.lut, colour_table(get_colormap("magma")))


def test_max_pool_float16_fast_path_matches_float32():
    rng = np.random.default_rng(4)
    a = rng.random((2, 2, 130, 130)).astype(np.float16)
    ref = max_pool(a.astype(np.float32))
    np.testing.assert_array_equal(max_pool(a), ref)
    a[1, 0, 5, 7] = -3.0  # negative values (a diff) take the float path and stay right
    a[1, 0, 4:8, 4:8] = -1.0
    got = max_pool(a)
    np.testing.assert_array_equal(got, max_pool(a.astype(np.float32)))


def test_ticks_follow_a_new_thumbnail_size(grid):
    grid.set_patterns(patterns(T=10))
    grid.set_patterns(patterns(T=300))  # same heads, other tile size
    assert grid.head_at(grid.head_scene_pos(2, 3)) == (2, 3)
    ticks = grid.plot.getAxis("left")._tickLevels[0]
    centre = grid.view.mapSceneToView(grid.head_scene_pos(2, 0)).y()
    assert ticks[2][0] == pytest.approx(centre)


def test_32_by_32_heads_fit_with_thinned_labels_and_stay_clickable(grid, qtbot):
    rng = np.random.default_rng(5)
    o = rng.random((32, 32, 8, 8)).astype(np.float16)
    grid.set_overviews(o, o, 1, 8)
    QtCore.QCoreApplication.processEvents()
    right, bottom = grid.head_scene_pos(31, 31), grid.head_scene_pos(0, 0)
    assert grid.view.sceneBoundingRect().contains(right) and grid.view.sceneBoundingRect().contains(bottom)
    major = grid.plot.getAxis("left")._tickLevels[0]
    assert [label for _pos, label in major] == [str(i) for i in range(0, 32, 4)]  # the rest only where they fit
    pos = grid.graphics.mapFromScene(grid.head_scene_pos(31, 30))
    with qtbot.waitSignal(grid.head_activated, timeout=2000) as sig:
        qtbot.mouseClick(grid.graphics.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=pos)
    assert sig.args == [31, 30]
    grid.view.scaleBy((0.25, 0.25))  # zoomed in, then Fit shows every head again
    grid.fit()
    assert grid.view.sceneBoundingRect().contains(grid.head_scene_pos(31, 31))
