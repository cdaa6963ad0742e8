"""SVG and PDF figures with crisp cells, rendered into memory and written in one atomic step.

A heatmap's ImageItem holds one pixel per cell. Qt's SVG and PDF engines embed that tiny bitmap
and let the renderer scale it up, which librsvg, ImageMagick and browsers all do by smoothing:
blurred cells. So while a figure is rendered, every image of at most VECTOR_CELLS_MAX x
VECTOR_CELLS_MAX pixels is swapped for an item that paints one rectangle per run of equal
cells, in the image's place in the stacking order. Larger images stay images (millions of
rectangles would be no better a figure) at their native resolution, marked
`image-rendering: pixelated` / `crisp-edges` so renderers scale them by nearest neighbour.

Text asks for the generic `sans-serif` family: Qt writes its own name for the default font
("Sans Serif"), which browsers do not know and replace with a serif face.

The whole document is rendered into a QBuffer first and handed to the project's atomic write
(`viewer.export.write_file`), so a renderer failure or a full disk never replaces the user's
file with a partial one.
"""

from __future__ import annotations

import contextlib
import re

import numpy as np

from transformer_viewer.viewer.export import ExportError, write_file

VECTOR_CELLS_MAX = 256
PIXELATED = "image-rendering:optimizeSpeed;image-rendering:crisp-edges;image-rendering:pixelated"
GENERIC_FAMILIES = {"sans serif", "sans-serif", "sans", "helvetica", "arial"}


def _cell_item_class():
    from PySide6 import QtCore, QtGui, QtWidgets

    class CellItem(QtWidgets.QGraphicsItem):
        """Paints an image's pixels as rectangles: one per run of equal colour along a row."""

        def __init__(self, rgba: np.ndarray):
            super().__init__()
            self._rgba = rgba  # (h, w) uint32 ARGB
            h, w = rgba.shape
            self._rect = QtCore.QRectF(0, 0, w, h)

        def boundingRect(self):
            return self._rect

        def paint(self, painter, _option, _widget=None):
            painter.setPen(QtCore.Qt.PenStyle.NoPen)
            painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, False)
            for y, row in enumerate(self._rgba):
                starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])  # a new colour begins
                ends = np.r_[starts[1:], len(row)]
                for x0, x1 in zip(starts.tolist(), ends.tolist(), strict=True):
                    argb = int(row[x0])
                    if argb >> 24 == 0:
                        continue  # transparent (NaN) cells show what is behind, as on screen
                    painter.fillRect(QtCore.QRectF(x0, y, x1 - x0, 1), QtGui.QColor.fromRgba(argb))

    return CellItem


def _argb(qimage) -> np.ndarray:
    from PySide6 import QtGui

    image = qimage.convertToFormat(QtGui.QImage.Format.Format_ARGB32)
    h, w = image.height(), image.width()
    data = np.frombuffer(image.constBits(), dtype=np.uint8, count=image.sizeInBytes())
    return data.reshape(h, image.bytesPerLine())[:, : 4 * w].copy().view(np.uint32).reshape(h, w)


@contextlib.contextmanager
def vector_cells(scenes, limit: int = VECTOR_CELLS_MAX):
    """Inside the block, visible ImageItems of at most `limit` x `limit` pixels in `scenes` are
    drawn as rectangles instead; afterwards everything is as it was."""
    import pyqtgraph as pg

    CellItem = _cell_item_class()
    swapped = []
    try:
        for scene, item in [(sc, it) for sc in scenes for it in sc.items()]:
            if not isinstance(item, pg.ImageItem) or not item.isVisible() or item.image is None:
                continue
            if item.qimage is None:
                item.render()
            if item.qimage is None or max(item.qimage.width(), item.qimage.height()) > limit:
                continue
            cells = CellItem(_argb(item.qimage))
            cells.setParentItem(item.parentItem())
            if item.parentItem() is None:
                scene.addItem(cells)
            cells.setTransform(item.transform())
            cells.setPos(item.pos())
            cells.setZValue(item.zValue())
            cells.setOpacity(item.opacity())
            cells.stackBefore(item)
            item.setVisible(False)
            swapped.append((item, cells))
        yield len(swapped)
    finally:
        for item, cells in swapped:
            item.setVisible(True)
            if cells.scene() is not None:
                cells.scene().removeItem(cells)


def _family(match: re.Match) -> str:
    families = [f.strip().strip("'\"") for f in match.group(1).split(",") if f.strip()]
    named = [f for f in families if f.lower() not in GENERIC_FAMILIES]
    return 'font-family="' + ", ".join([*(f"'{f}'" for f in named), "sans-serif"]) + '"'


def finish_svg(svg: bytes) -> bytes:
    """Qt's SVG, with a generic font family, pixelated images and rectangles without seams."""
    text = svg.decode("utf-8")
    text = re.sub(r'font-family="([^"]*)"', _family, text)
    text = text.replace("<image ", f'<image style="{PIXELATED}" ')
    # Anti-aliased edges of abutting cells let the background show through as hairlines.
    text = text.replace("<rect ", '<rect shape-rendering="crispEdges" ')
    return text.encode("utf-8")


def _scenes(target):
    """(view, widget, scenes): what export renders, and every graphics scene inside it."""
    from PySide6 import QtWidgets

    from transformer_viewer.viewer.export import _graphics_view

    view, widget = _graphics_view(target)
    views = [view] if view is not None else widget.findChildren(QtWidgets.QGraphicsView)
    return view, widget, [v.scene() for v in views if v.scene() is not None]


def render_svg(target, size=None, title: str = "transformer-viewer") -> bytes:
    """The SVG document of `target`, in memory."""
    from PySide6 import QtCore
    from PySide6.QtSvg import QSvgGenerator

    from transformer_viewer.viewer.export import _sized

    view, widget, scenes = _scenes(target)
    buffer = QtCore.QBuffer()
    buffer.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    with _sized(view, widget, size) as (w, h), vector_cells(scenes):
        gen = QSvgGenerator()
        gen.setOutputDevice(buffer)
        gen.setSize(QtCore.QSize(w, h))
        gen.setViewBox(QtCore.QRect(0, 0, w, h))
        gen.setResolution(96)  # CSS pixels: width/height in mm then match w x h px
        gen.setTitle(title)
        gen.setDescription("exported by transformer-viewer")
        _paint(gen, "SVG", view, widget, w, h)
    return finish_svg(bytes(buffer.data()))


def render_pdf(target, size=None, title: str = "transformer-viewer") -> bytes:
    """A one-page vector PDF of `target`, the page the size of the view (1 px = 1/96 inch)."""
    from PySide6 import QtCore, QtGui

    from transformer_viewer.viewer.export import _sized

    view, widget, scenes = _scenes(target)
    buffer = QtCore.QBuffer()
    buffer.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    with _sized(view, widget, size) as (w, h), vector_cells(scenes):
        writer = QtGui.QPdfWriter(buffer)
        writer.setResolution(96)
        writer.setTitle(title)
        writer.setCreator("transformer-viewer")
        page = QtGui.QPageSize(QtCore.QSizeF(w * 72 / 96, h * 72 / 96), QtGui.QPageSize.Unit.Point, "view")
        writer.setPageLayout(QtGui.QPageLayout(page, QtGui.QPageLayout.Orientation.Portrait, QtCore.QMarginsF(0, 0, 0, 0)))
        _paint(writer, "PDF", view, widget, w, h)
    return bytes(buffer.data())


def _paint(device, kind: str, view, widget, w: int, h: int) -> None:
    """Render the view onto a vector paint device; a device Qt cannot paint on is one line."""
    from PySide6 import QtGui

    from transformer_viewer.viewer.export import _render

    painter = QtGui.QPainter()
    if not painter.begin(device):
        raise ExportError(f"Qt could not render the {w}x{h} view as {kind}; export a PNG instead")
    try:
        _render(view, widget, painter, w, h)
    finally:
        painter.end()


def export_svg(target, path, size=None, title: str = "transformer-viewer") -> str:
    return write_file(path, render_svg(target, size, title))


def export_pdf(target, path, size=None, title: str = "transformer-viewer") -> str:
    return write_file(path, render_pdf(target, size, title))
