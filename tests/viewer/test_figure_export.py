"""Figures for papers: SVG whose cells stay crisp in real renderers (librsvg's rsvg-convert and
headless Chromium rasterise it here), a generic sans-serif font, vector PDF, and writes that
never replace the user's file with a partial one.

A cell boundary is sharp when the pixels across it jump from one cell's colour to the next's;
a bitmap scaled up by smoothing shows a ramp of in-between colours several pixels wide."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PySide6 import QtCore, QtGui

from transformer_viewer.viewer import vector_export
from transformer_viewer.viewer.export import ExportError, export_pdf, export_svg, export_view
from transformer_viewer.viewer.views.heatmap import HeatmapView

SVG_NS = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}href"


def stripes(qtbot, n: int, block: int, size=(400, 400)) -> HeatmapView:
    """n x n cells, columns alternating 0 and 1 in blocks of `block`: a boundary every block."""
    view = HeatmapView()
    qtbot.addWidget(view)
    view.resize(*size)
    view.show()
    qtbot.waitExposed(view)
    m = ((np.indices((n, n))[1] // block) % 2).astype(np.float32)
    labels = tuple(str(i) for i in range(n))
    view.set_data(m, labels, labels)
    return view


def image_rect(view) -> QtCore.QRect:
    """Where the cells are in the exported picture, in its pixels (export renders the viewport)."""
    gv, img = view.export_target(), view.image
    return gv.mapFromScene(img.mapRectToScene(img.boundingRect())).boundingRect()


def rasterise(tool: str, svg: str, png: str, zoom: int, size: tuple[int, int]) -> QtGui.QImage:
    exe = shutil.which(tool)
    if exe is None:
        pytest.skip(f"{tool} is not installed (Debian: apt-get install {'librsvg2-bin' if tool == 'rsvg-convert' else tool})")
    if tool == "rsvg-convert":
        cmd = [exe, "-z", str(zoom), svg, "-o", png]
    else:  # headless Chromium: the SVG as a page, screenshot at `zoom` device pixels per CSS pixel
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--force-device-scale-factor={zoom}",
               f"--window-size={size[0]},{size[1]}", f"--screenshot={png}", "file://" + os.path.abspath(svg)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    image = QtGui.QImage(png)
    assert done.returncode == 0 and not image.isNull(), done.stderr[-500:]
    return image


def crossing(image: QtGui.QImage, rect: QtCore.QRect, zoom: int) -> tuple[int, set]:
    """Along the middle row of the cells: (pixels of neither stripe colour, the colours seen)."""
    y = int((rect.top() + rect.height() / 2) * zoom)
    xs = range(int(rect.left() * zoom) + 3, int(rect.right() * zoom) - 3)
    row = np.array([QtGui.QColor(image.pixel(x, y)).getRgb()[:3] for x in xs])
    low, high = (np.array(c.getRgb()[:3]) for c in (colour(0.0), colour(1.0)))
    near = np.minimum(np.abs(row - low).sum(1), np.abs(row - high).sum(1))
    return int((near > 30).sum()), {tuple(c) for c in row[near <= 30]}


def colour(v: float) -> QtGui.QColor:
    import pyqtgraph as pg

    return pg.colormap.get("viridis").map(v, mode="qcolor")


@pytest.mark.parametrize("tool", ["rsvg-convert", "chromium"])
def test_small_matrix_cells_are_sharp(qtbot, tmp_path, tool):
    view = stripes(qtbot, 16, 1)
    svg = export_svg(view, tmp_path / "f.svg")
    gv = view.export_target()
    image = rasterise(tool, svg, str(tmp_path / "f.png"), 2, (gv.width(), gv.height()))
    between, seen = crossing(image, image_rect(view), 2)
    assert len(seen) == 2  # both stripe colours, as the data say
    assert between <= 15  # 15 boundaries at ~22 px per cell: at most one edge pixel each, no ramp


def test_small_matrix_is_vector_rectangles_and_sans_serif(qtbot, tmp_path):
    view = stripes(qtbot, 16, 1)
    root = ET.parse(export_svg(view, tmp_path / "f.svg")).getroot()
    images = list(root.iter(f"{SVG_NS}image"))
    assert [im.get("width") for im in images] == ["1"]  # only the colour bar's 1 x 256 gradient
    assert len(list(root.iter(f"{SVG_NS}rect"))) >= 16 * 16  # 16 runs in each of 16 rows
    families = {el.get("font-family") for el in root.iter() if el.get("font-family")}
    assert families and all(f.split(",")[-1].strip() == "sans-serif" for f in families)


def test_large_matrix_is_a_native_image_marked_pixelated(qtbot, tmp_path):
    view = stripes(qtbot, 300, 30)
    root = ET.parse(export_svg(view, tmp_path / "f.svg")).getroot()
    big = [im for im in root.iter(f"{SVG_NS}image") if im.get("width") == "300"]
    assert len(big) == 1
    assert "image-rendering:pixelated" in big[0].get("style") and "crisp-edges" in big[0].get("style")
    png = QtGui.QImage.fromData(base64.b64decode(big[0].get(XLINK).split(",", 1)[1]))
    assert (png.width(), png.height()) == (300, 300)  # one pixel per cell, no resampling


def test_large_matrix_is_sharp_in_a_browser(qtbot, tmp_path):
    """Chromium honours `image-rendering: pixelated`. (librsvg up to 2.54 ignores the property
    for bitmaps and smooths them, which is why matrices up to 256 x 256 are drawn as vectors.)"""
    view = stripes(qtbot, 300, 30)
    svg = export_svg(view, tmp_path / "f.svg")
    gv = view.export_target()
    image = rasterise("chromium", svg, str(tmp_path / "f.png"), 8, (gv.width(), gv.height()))
    between, seen = crossing(image, image_rect(view), 8)
    assert len(seen) == 2 and between <= 2 * 9  # 9 boundaries at ~9 px per cell: at most 2 edge pixels each


def test_pdf_is_one_vector_page_the_size_of_the_view(qtbot, tmp_path):
    view = stripes(qtbot, 16, 1, size=(480, 400))
    path = export_pdf(view, tmp_path / "f.pdf")
    data = open(path, "rb").read()
    assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")
    assert len(re.findall(rb"/Type\s*/Page\b", data)) == 1
    gv = view.export_target()
    box = [float(v) for v in re.search(rb"/MediaBox \[([^\]]+)\]", data).group(1).split()]
    assert box[2:] == pytest.approx([gv.width() * 0.75, gv.height() * 0.75], abs=1.0)  # 96 px = 72 pt
    assert data.count(b"/Subtype /Image") == 1  # the colour bar; the cells are vector rectangles


def test_cli_export_writes_pdf(tiny_ckpt, tmp_path, capsys):
    from transformer_viewer.viewer.cli.main import main

    out = tmp_path / "a.pdf"
    assert main(["export", tiny_ckpt, "--device", "cpu", "--prompt", "The cat sat", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"%PDF-")


@pytest.mark.parametrize("ext", [".svg", ".pdf"])
def test_a_failed_render_keeps_the_users_file(qtbot, tmp_path, monkeypatch, ext):
    view = stripes(qtbot, 4, 1)
    path = tmp_path / f"figure{ext}"
    path.write_bytes(b"the user's figure")

    def broken(*_a, **_kw):
        raise ExportError("Qt could not start the document")
    monkeypatch.setattr(vector_export, f"render_{ext[1:]}", broken)
    with pytest.raises(ExportError):
        export_view(view, path)
    assert path.read_bytes() == b"the user's figure" and os.listdir(tmp_path) == [path.name]


def test_a_full_disk_keeps_the_users_file(qtbot, tmp_path, monkeypatch):
    """The disk fills up mid-document: the write helper notices, and the half-written temporary
    never replaces the user's file."""
    from transformer_viewer.model.files import atomic_write

    view = stripes(qtbot, 4, 1)
    path = tmp_path / "figure.svg"
    path.write_bytes(b"the user's figure")
    real_write = atomic_write.os.write
    calls = []

    def fill_up(fd, data):
        calls.append(len(data))
        return real_write(fd, bytes(data[: len(data) // 2])) if len(calls) == 1 else 0
    monkeypatch.setattr(atomic_write.os, "write", fill_up)
    with pytest.raises(ExportError, match="cannot write"):
        export_svg(view, path)
    assert len(calls) >= 2  # the document did not fit in the first write
    assert path.read_bytes() == b"the user's figure" and os.listdir(tmp_path) == [path.name]


# -- every exported view, drawn alike by librsvg, Chromium and the PDF --------------------------
FIGURE_ARGS = {  # what each view shows: a selected row (a red outline) wherever it has one
    "attention": ["--head", "1.2", "--query", "3"],
    "grid": ["--head", "1.0", "--mask", "0.1"],  # the masked head crossed in red
    "residual": ["--head", "1.1", "--query", "3"],
    "mlp": [],
    "logit-lens": [],
    "scan": [],
    "diff": ["--mask", "0.1"],
    "attribution": [],
    "routes": [],  # edges of many widths: strokes that renderers must draw alike
    "rollout": [],
    "patching": ["--corrupted", "The cat sat on the mat, and the dog slept.", "--what", "heads", "--metric", "kl",
                 "--size", "1200x900"],  # its long title: a smaller share of the figure
}
OUTLINE = (255, 60, 60)  # the selected query row's / head's outline
LINE = (30, 100, 200)  # the residual view's norm through depth


def _figure_cases():
    from transformer_viewer.viewer.views.registry import exportable

    assert set(FIGURE_ARGS) == set(exportable())  # a new exportable view gets a case here
    return [(v, "light") for v in sorted(FIGURE_ARGS)] + [("residual", "dark")]


@pytest.mark.parametrize("name, theme", _figure_cases())
def test_every_renderer_draws_the_exported_view_as_its_pdf(tiny_ckpt, tmp_path, capsys, name, theme):
    """librsvg once drew the selected row's 2-pixel outline as a band the height of the row
    scaled up (a non-scaling stroke inside a scaled group), and line plots as ribbons; every
    renderer must now agree with the PDF, outlines and lines included."""
    from tests.helpers.rasterise import count_colour, mismatch, pixels, rasterise_pdf, rasterise_svg
    from transformer_viewer.viewer.cli.main import main

    base = ["export", tiny_ckpt, "--device", "cpu", "--prompt", "The cat sat on the mat, and the cat slept.",
            "--view", name, "--theme", theme, *FIGURE_ARGS[name]]
    for ext in (".svg", ".pdf"):
        assert main([*base, "--out", str(tmp_path / f"f{ext}")]) == 0, capsys.readouterr().err
    root = ET.parse(tmp_path / "f.svg").getroot()
    assert not [el.tag for el in root.iter() if el.get("vector-effect")]  # SVG Tiny's, which librsvg ignores
    w, h = (round(float(v)) for v in root.get("viewBox").split()[2:])
    pdf = pixels(rasterise_pdf(tmp_path / "f.pdf", tmp_path / "pdf"))
    assert abs(pdf.shape[1] - w) <= 1 and abs(pdf.shape[0] - h) <= 1
    page = (255, 255, 255) if theme == "light" else (0, 0, 0)
    assert count_colour(pdf[:4], page, 8) == pdf[:4].size // 3  # the top rows: the theme's page
    for renderer in ("rsvg-convert", "chromium"):
        drawn = pixels(rasterise_svg(renderer, tmp_path / "f.svg", tmp_path / f"{renderer}.png", size=(w, h)))
        assert mismatch(drawn, pdf) < 0.02, renderer
        for ink in (OUTLINE, LINE):
            want = count_colour(pdf, ink)
            if want:  # an outline or a line as thin as in the PDF: not a band, not a ribbon
                assert 0.5 * want <= count_colour(drawn, ink) <= 2 * want + 20, (renderer, ink)
    if name in ("attention", "grid", "residual"):
        assert count_colour(pdf, OUTLINE) > 0  # the cases do show a selection
    if name == "residual":
        assert count_colour(pdf, LINE) > 0
