"""SVG and PDF figures with crisp cells, rendered into memory and written in one atomic step.

A heatmap's ImageItem holds one pixel per cell. Qt's SVG and PDF engines embed that tiny bitmap
and let the renderer scale it up, which librsvg, ImageMagick and browsers all do by smoothing:
blurred cells. So while a figure is rendered, every image of at most VECTOR_CELLS_MAX x
VECTOR_CELLS_MAX pixels is swapped for an item that paints one rectangle per run of equal
cells, in the image's place in the stacking order. Larger images stay images (millions of
rectangles would be no better a figure) at their native resolution, marked
`image-rendering: pixelated` / `crisp-edges` so renderers scale them by nearest neighbour.

A line plot's markers are drawn on screen as pieces of one bitmap of every marker the plot has
drawn; Qt's SVG engine would embed that whole bitmap, squeezed, for each marker. While a figure
is rendered they are drawn as vector shapes instead (`vector_markers`).

Text asks for the generic `sans-serif` family: Qt writes its own name for the default font
("Sans Serif"), which browsers do not know and replace with a serif face.

The whole document is rendered into a QBuffer first and handed to the project's atomic write
(`viewer.export_files.write_file`), so a renderer failure or a full disk never replaces the user's
file with a partial one.
"""

from __future__ import annotations

import contextlib
import re
import xml.etree.ElementTree as ET

import numpy as np

from transformer_viewer.viewer.export_files import ExportError, write_file
from transformer_viewer.viewer.export_layout import graphics_view_of, laid_out

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
def vector_markers(scenes):
    """Inside the block, the scatter markers in `scenes` are painted as shapes, not cut from
    their bitmap atlas (pyqtgraph's own exporters do the same)."""
    import pyqtgraph as pg

    items = [it for sc in scenes for it in sc.items() if isinstance(it, pg.ScatterPlotItem)]
    try:
        for item in items:
            item.setExportMode(True, {"antialias": True})
        yield len(items)
    finally:
        for item in items:
            item.setExportMode(False)


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


# -- strokes in the coordinates they are drawn in ------------------------------------------------
# Qt draws a cosmetic pen (the selected row's outline, line plots, frames) as a shape in the
# item's own coordinates inside a scaled group, marked vector-effect="non-scaling-stroke" so
# that its width stays in device pixels. That is SVG Tiny 1.2: browsers honour it, librsvg and
# ImageMagick do not, and draw the width scaled by the group's transform (a 2 px outline under
# a 50x scale is a 100 px band). So every such shape is moved out of its group, its geometry
# multiplied by the group's transform: its stroke width is then in the coordinates it is drawn
# in, and every renderer draws it alike.
SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_PAIR = re.compile(rf"({_NUMBER})\s*,\s*({_NUMBER})")
_KAPPA = 0.5522847498  # cubic Bezier control distance of a quarter circle of radius 1


def _matrix(text: str | None) -> tuple[float, ...] | None:
    """(a, b, c, d, e, f) of an SVG `matrix(...)` / `translate(...)` transform; None for none."""
    if not text:
        return None
    kind, _, rest = text.strip().partition("(")
    values = [float(v) for v in re.findall(_NUMBER, rest)]
    if kind.strip() == "matrix" and len(values) == 6:
        return tuple(values)
    if kind.strip() == "translate" and values:
        return (1.0, 0.0, 0.0, 1.0, values[0], values[1] if len(values) > 1 else 0.0)
    raise ExportError(f"unexpected SVG transform {text!r} from Qt; export a PDF instead")


def _apply(m, x: float, y: float) -> tuple[float, float]:
    a, b, c, d, e, f = m
    return a * x + c * y + e, b * x + d * y + f


def _pairs(m, text: str) -> str:
    def one(match: re.Match) -> str:
        x, y = _apply(m, float(match[1]), float(match[2]))
        return f"{x:.6g},{y:.6g}"
    return _PAIR.sub(one, text)


def _ellipse_path(cx: float, cy: float, rx: float, ry: float) -> str:
    k, q = _KAPPA * rx, _KAPPA * ry
    return (f"M{cx + rx},{cy} C{cx + rx},{cy + q} {cx + k},{cy + ry} {cx},{cy + ry} "
            f"C{cx - k},{cy + ry} {cx - rx},{cy + q} {cx - rx},{cy} C{cx - rx},{cy - q} {cx - k},{cy - ry} {cx},{cy - ry} "
            f"C{cx + k},{cy - ry} {cx + rx},{cy - q} {cx + rx},{cy} Z")


def _bake(element, m) -> None:
    """Rewrite `element`'s geometry from its group's coordinates into the group's parent's, by
    the group's transform `m`; its stroke attributes stay as they are (device units)."""
    tag = element.tag.removeprefix(f"{{{SVG_NS}}}")
    get = element.attrib.get
    number = lambda name: float(get(name, "0") or 0)  # noqa: E731
    if tag == "rect" and m[1] == 0 and m[2] == 0:
        x0, y0 = _apply(m, number("x"), number("y"))
        x1, y1 = _apply(m, number("x") + number("width"), number("y") + number("height"))
        element.attrib.update(x=f"{min(x0, x1):.6g}", y=f"{min(y0, y1):.6g}",
                              width=f"{abs(x1 - x0):.6g}", height=f"{abs(y1 - y0):.6g}")
        return
    if tag in ("rect", "ellipse", "circle"):
        if tag == "rect":
            x, y, w, h = number("x"), number("y"), number("width"), number("height")
            d = f"M{x},{y} L{x + w},{y} L{x + w},{y + h} L{x},{y + h} Z"
        else:
            rx = number("r") if tag == "circle" else number("rx")
            ry = number("r") if tag == "circle" else number("ry")
            d = _ellipse_path(number("cx"), number("cy"), rx, ry)
        for name in ("x", "y", "width", "height", "cx", "cy", "r", "rx", "ry"):
            element.attrib.pop(name, None)
        element.tag = f"{{{SVG_NS}}}path"
        element.set("d", _pairs(m, d))
    elif tag == "path":
        element.set("d", _pairs(m, get("d", "")))
    elif tag in ("polyline", "polygon"):
        element.set("points", _pairs(m, get("points", "")))
    elif tag == "line":
        x1, y1 = _apply(m, number("x1"), number("y1"))
        x2, y2 = _apply(m, number("x2"), number("y2"))
        element.attrib.update(x1=f"{x1:.6g}", y1=f"{y1:.6g}", x2=f"{x2:.6g}", y2=f"{y2:.6g}")
    else:
        raise ExportError(f"unexpected non-scaling <{tag}> in Qt's SVG; export a PDF instead")


def _non_scaling(element) -> bool:
    return element.get("vector-effect") == "non-scaling-stroke"


def _unit_scale(m) -> bool:
    return m is None or tuple(m[:4]) == (1.0, 0.0, 0.0, 1.0)


def bake_strokes(parent, scaled: bool = False) -> None:
    """Below `parent`, every shape with a non-scaling stroke moved out of its scaled group into
    a sibling group without the transform, its geometry in the sibling's coordinates, and the
    attribute removed. `scaled`: a group above `parent` scales, which Qt never does above a
    group that scales again (its transforms are one deep) and is refused."""
    for index, group in reversed(list(enumerate(parent))):
        if group.tag != f"{{{SVG_NS}}}g":
            if _non_scaling(group) and not scaled:
                del group.attrib["vector-effect"]  # unscaled: the stroke is already in device units
            continue
        m = _matrix(group.get("transform"))
        if scaled and not _unit_scale(m):
            raise ExportError("nested scaled groups in Qt's SVG; export a PDF instead")
        if _unit_scale(m) or not any(_non_scaling(c) for c in group):
            bake_strokes(group, scaled or not _unit_scale(m))
            continue
        runs: list[tuple[bool, list]] = []  # consecutive children: (baked?, elements), in order
        for child in list(group):
            baked = _non_scaling(child)
            if baked:
                _bake(child, m)
                del child.attrib["vector-effect"]
            if runs and runs[-1][0] == baked:
                runs[-1][1].append(child)
            else:
                runs.append((baked, [child]))
        pieces = []
        for baked, elements in runs:
            piece = ET.Element(group.tag, dict(group.attrib))
            if baked:
                del piece.attrib["transform"]
            piece.text, piece.tail = group.text, "\n"
            piece.extend(elements)
            bake_strokes(piece, scaled or not baked)
            pieces.append(piece)
        pieces[-1].tail = group.tail
        parent.remove(group)
        for offset, piece in enumerate(pieces):
            parent.insert(index + offset, piece)


def finish_svg(svg: bytes) -> bytes:
    """Qt's SVG made plain SVG 1.1 that librsvg, browsers and Inkscape draw alike: strokes in
    the coordinates they are drawn in, a generic font family, pixelated images and rectangles
    without seams."""
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", XLINK_NS)
    root = ET.fromstring(svg)
    root.set("version", "1.1")
    root.attrib.pop("baseProfile", None)  # Tiny 1.2 is a profile the renderers above do not follow
    bake_strokes(root)
    for element in root.iter():
        if element.get("vector-effect") == "none":  # the default, said in a profile not all renderers read
            del element.attrib["vector-effect"]
    text = ET.tostring(root, encoding="unicode")
    text = re.sub(r'font-family="([^"]*)"', _family, text)
    text = text.replace("<image ", f'<image style="{PIXELATED}" ')
    # Anti-aliased edges of abutting cells let the background show through as hairlines.
    text = text.replace("<rect ", '<rect shape-rendering="crispEdges" ')
    return ('<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n' + text).encode("utf-8")


def _scenes(target):
    """Every graphics scene export renders of `target`."""
    from PySide6 import QtWidgets


    view, widget = graphics_view_of(target)
    views = [view] if view is not None else widget.findChildren(QtWidgets.QGraphicsView)
    return [v.scene() for v in views if v.scene() is not None]


def _document_title(style) -> str:
    return (style.title if style is not None and style.title else "") or "transformer-viewer"


def render_svg(target, size=None, style=None) -> bytes:
    """The SVG document of `target` as a figure (viewer/figure.py), in memory; its width and
    height in millimetres are its logical pixels at 96 per inch."""
    from PySide6 import QtCore
    from PySide6.QtSvg import QSvgGenerator


    buffer = QtCore.QBuffer()
    buffer.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    with laid_out(target, size, style) as (w, h, paint), vector_cells(_scenes(target)), vector_markers(_scenes(target)):
        gen = QSvgGenerator()
        gen.setOutputDevice(buffer)
        gen.setSize(QtCore.QSize(w, h))
        gen.setViewBox(QtCore.QRect(0, 0, w, h))
        gen.setResolution(96)  # CSS pixels: width/height in mm then match w x h px
        gen.setTitle(_document_title(style))
        gen.setDescription("exported by transformer-viewer")
        _paint(gen, "SVG", paint, w, h)
    svg = finish_svg(bytes(buffer.data()))
    if style is not None and style.manifest:
        from transformer_viewer.model.sessions.figure_manifest import embedded_svg

        svg = embedded_svg(svg, style.manifest)
    return svg


def render_pdf(target, size=None, style=None) -> bytes:
    """A one-page vector PDF of `target` as a figure, the page its size (1 logical px = 1/96 inch);
    Qt's PDF writer embeds the subset of each font the text uses."""
    from PySide6 import QtCore, QtGui


    buffer = QtCore.QBuffer()
    buffer.open(QtCore.QIODevice.OpenModeFlag.WriteOnly)
    with laid_out(target, size, style) as (w, h, paint), vector_cells(_scenes(target)), vector_markers(_scenes(target)):
        writer = QtGui.QPdfWriter(buffer)
        writer.setResolution(96)
        writer.setTitle(_document_title(style))
        writer.setCreator("transformer-viewer")
        if style is not None and style.manifest:
            from transformer_viewer.model.sessions.figure_manifest import xmp_packet

            writer.setDocumentXmpMetadata(QtCore.QByteArray(xmp_packet(style.manifest)))
        page = QtGui.QPageSize(QtCore.QSizeF(w * 72 / 96, h * 72 / 96), QtGui.QPageSize.Unit.Point, "view")
        writer.setPageLayout(QtGui.QPageLayout(page, QtGui.QPageLayout.Orientation.Portrait, QtCore.QMarginsF(0, 0, 0, 0)))
        _paint(writer, "PDF", paint, w, h)
    return bytes(buffer.data())


def _paint(device, kind: str, paint, w: int, h: int) -> None:
    """Draw the figure onto a vector paint device; a device Qt cannot paint on is one line."""
    from PySide6 import QtGui

    painter = QtGui.QPainter()
    if not painter.begin(device):
        raise ExportError(f"Qt could not render the {w}x{h} view as {kind}; export a PNG instead")
    try:
        paint(painter)
    finally:
        painter.end()


def export_svg(target, path, size=None, style=None) -> str:
    return write_file(path, render_svg(target, size, style))


def export_pdf(target, path, size=None, style=None) -> str:
    return write_file(path, render_pdf(target, size, style))
