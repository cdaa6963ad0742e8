"""Export: PNG / SVG render the view, .npy / .csv write the displayed matrix; atomic, clear errors."""

import os
import struct
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PySide6 import QtGui

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files import atomic_write
from transformer_viewer.viewer import export as ex
from transformer_viewer.viewer.export import (
    ExportError,
    export_matrix,
    export_png,
    export_svg,
    export_view,
    read_csv_matrix,
)
from transformer_viewer.viewer.views.head_grid import HeadGridView
from transformer_viewer.viewer.views.heatmap import HeatmapView

# Labels as tokens really look: commas, quotes, a leading dot for the space, a newline escape.
LABELS = ("The", "\u00b7cat", ",", '"', "\u00b7it's", "a,b\"c", "\\n")
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def view(qtbot):
    w = HeatmapView()
    qtbot.addWidget(w)
    w.resize(600, 560)
    w.show()
    qtbot.waitExposed(w)
    rng = np.random.default_rng(3)
    m = np.tril(rng.random((7, 7))).astype(np.float32)
    w.set_data(m / m.sum(1, keepdims=True), LABELS, LABELS, title="layer 0 head 1")
    return w


def png_size(path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def leftovers(folder) -> list[str]:
    return [n for n in os.listdir(folder) if n.endswith(".part")]


def test_png_has_header_and_scaled_size(view, tmp_path):
    gv = view.export_target()
    w, h = gv.width(), gv.height()
    p1 = export_png(view, tmp_path / "a.png")
    fw, fh = png_size(p1)
    assert fw == w and fh > h  # the plots at their on-screen size, and a band of notes ("·" marks a space)
    p2 = export_png(view, tmp_path / "b.png", scale=2.0)
    assert png_size(p2) == (2 * fw, 2 * fh)
    p3 = export_png(view, tmp_path / "c.png", size=(400, 300))
    assert png_size(p3) == (400, 300)
    assert (gv.width(), gv.height()) == (w, h)  # the on-screen view is given its size back
    img = QtGui.QImage(str(p2))
    colours = {img.pixel(x, y) for x in range(0, img.width(), 7) for y in range(0, img.height(), 7)}
    assert len(colours) > 20  # a picture, not a blank canvas
    assert leftovers(tmp_path) == []


def test_svg_parses_and_draws_the_heatmap_as_cells(view, tmp_path):
    path = export_svg(view, tmp_path / "a.svg")
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG_NS}svg"
    images = list(root.iter(f"{SVG_NS}image"))
    assert len(images) == 1 and images[0].get("width") == "1"  # only the colour bar's gradient is a bitmap
    assert len(list(root.iter(f"{SVG_NS}rect"))) >= 7 * 4  # 7 rows of runs of equal cells (28 nonzero cells)
    text = "".join(root.itertext())
    assert "layer 0 head 1" in text and "query" in text  # titles and axes stay text, not pixels
    assert leftovers(tmp_path) == []


def test_npy_equals_displayed_matrix(view, tmp_path):
    view.set_log_scale(True)  # what is written is the matrix, not its log
    path = export_view(view, tmp_path / "m.npy")
    np.testing.assert_array_equal(np.load(path), view.matrix())


def test_csv_round_trips_values_and_quoted_labels(view, tmp_path):
    path = export_view(view, tmp_path / "m.csv")
    values, rows, cols = read_csv_matrix(path)
    assert tuple(rows) == LABELS and tuple(cols) == LABELS
    np.testing.assert_array_equal(values.astype(np.float32), view.matrix())
    with open(path, encoding="utf-8") as f:
        header = f.readline()
    assert header.startswith(',The,\u00b7cat,",",""""')  # commas and quotes are quoted


def test_export_view_dispatches_images(view, tmp_path):
    assert png_size(export_view(view, tmp_path / "x.PNG", scale=0.5))[0] == round(view.export_target().width() * 0.5)
    ET.parse(export_view(view, tmp_path / "x.svg"))


def test_unknown_extension_is_a_one_line_error(view, tmp_path):
    with pytest.raises(ExportError, match=r"use a file name ending in \.png, \.svg, \.pdf, \.npy, \.csv") as e:
        export_view(view, tmp_path / "x.bmp")
    assert "\n" not in str(e.value)
    assert isinstance(e.value, ModelError)  # so the CLI and the app's dialog handle it
    with pytest.raises(ExportError, match="no extension"):
        export_view(view, tmp_path / "noext")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["a.png", "a.svg", "a.npy", "a.csv"])
def test_missing_folder_leaves_nothing(view, tmp_path, name):
    target = tmp_path / "no" / "such" / name
    with pytest.raises(ExportError, match="does not exist"):
        export_view(view, target)
    assert not (tmp_path / "no").exists()


def test_parent_is_a_file_or_target_is_a_folder(view, tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ExportError, match="does not exist"):
        export_view(view, tmp_path / "f" / "a.png")
    (tmp_path / "d.png").mkdir()
    with pytest.raises(ExportError, match="is a folder"):
        export_view(view, tmp_path / "d.png")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write read-only folders")
def test_read_only_folder(view, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ExportError, match="not writable"):
            export_view(view, ro / "a.png")
        assert os.listdir(ro) == []
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("name", ["a.png", "a.svg", "a.npy", "a.csv"])
def test_failure_while_writing_leaves_no_partial_file_and_keeps_old(view, tmp_path, monkeypatch, name):
    target = tmp_path / name
    target.write_bytes(b"old")

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ex.os, "replace", boom)
    with pytest.raises(ExportError, match="No space left on device"):
        export_view(view, target)
    assert target.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_written_file_gets_normal_permissions(view, tmp_path):
    old = os.umask(0o022)
    try:
        path = export_view(view, tmp_path / "m.npy")
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o644


def test_csv_needs_two_dimensions(tmp_path):
    with pytest.raises(ExportError, match="export .npy instead"):
        export_matrix(np.zeros((2, 2, 2)), tmp_path / "x.csv")
    export_matrix(np.zeros((2, 2, 2)), tmp_path / "x.npy")
    assert np.load(tmp_path / "x.npy").shape == (2, 2, 2)


def test_bad_scale(view, tmp_path):
    with pytest.raises(ExportError, match="scale"):
        export_png(view, tmp_path / "a.png", scale=0)


def test_grid_png_and_npy(qtbot, tmp_path):
    g = HeadGridView()
    qtbot.addWidget(g)
    g.resize(400, 300)
    g.show()
    qtbot.waitExposed(g)
    a = (np.tril(np.ones((2, 3, 5, 5))) / np.arange(1, 6)[:, None]).astype(np.float32)
    g.set_patterns(a, np.eye(2, 3, dtype=bool))
    assert png_size(export_view(g, tmp_path / "g.png", scale=2)) == (2 * g.graphics.width(), 2 * g.graphics.height())
    np.testing.assert_array_equal(np.load(export_view(g, tmp_path / "g.npy")), a)
    ET.parse(export_view(g, tmp_path / "g.svg"))


def test_folder_refusing_the_temp_file(view, tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(atomic_write.tempfile, "mkstemp", refuse)  # as a read-only mount would, even for root
    with pytest.raises(ExportError, match="Permission denied; choose a folder you can write to"):
        export_view(view, tmp_path / "a.csv")
    assert os.listdir(tmp_path) == []


def test_plain_widget_renders_too(qtbot, tmp_path):
    from PySide6 import QtWidgets

    label = QtWidgets.QLabel("a plain widget, not a graphics view")
    qtbot.addWidget(label)
    label.resize(300, 80)
    label.show()
    qtbot.waitExposed(label)
    assert png_size(export_png(label, tmp_path / "w.png", scale=2)) == (600, 160)
    ET.parse(export_svg(label, tmp_path / "w.svg"))
    with pytest.raises(ExportError, match="cannot render a int"):
        export_png(3, tmp_path / "x.png")
