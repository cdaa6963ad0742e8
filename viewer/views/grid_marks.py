"""What the heads grid draws over its thumbnails, and how it fits its view: masked heads greyed
and crossed, the selected head framed, layer and head labels that thin out, and the range that
shows every head in the view's own aspect."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets


class GridMarks:
    """The mask and selection marks of a grid whose tile (layer, head) is [head * cell, +1) x
    [layer * cell, +1) in view units."""

    def __init__(self, plot: pg.PlotItem):
        self.fill = QtWidgets.QGraphicsPathItem()
        self.fill.setBrush(QtGui.QColor(128, 128, 128, 170))
        self.fill.setPen(QtGui.QPen(QtCore.Qt.PenStyle.NoPen))
        self.crosses = QtWidgets.QGraphicsPathItem()
        cross_pen = pg.mkPen((235, 50, 50), width=2)
        cross_pen.setCosmetic(True)
        self.crosses.setPen(cross_pen)
        self.frame = QtWidgets.QGraphicsRectItem()
        frame_pen = pg.mkPen((255, 255, 255), width=3)
        frame_pen.setCosmetic(True)
        self.frame.setPen(frame_pen)
        self.frame.hide()
        for z, item in enumerate((self.fill, self.crosses, self.frame), start=5):
            item.setZValue(z)
            plot.addItem(item, ignoreBounds=True)

    def set_mask(self, mask: np.ndarray, cell: float) -> None:
        fill, cross = QtGui.QPainterPath(), QtGui.QPainterPath()
        for layer, head in zip(*np.nonzero(mask), strict=True):
            x, y = head * cell, layer * cell
            fill.addRect(QtCore.QRectF(x, y, 1, 1))
            cross.moveTo(x, y)
            cross.lineTo(x + 1, y + 1)
            cross.moveTo(x + 1, y)
            cross.lineTo(x, y + 1)
        self.fill.setPath(fill)
        self.crosses.setPath(cross)

    def set_selected(self, layer: int | None, head: int | None, cell: float) -> None:
        if layer is None or head is None:
            self.frame.hide()
            return
        pad = 0.04
        self.frame.setRect(QtCore.QRectF(head * cell - pad, layer * cell - pad, 1 + 2 * pad, 1 + 2 * pad))
        self.frame.show()


def thinned_ticks(n: int, cell: float) -> list[list[tuple[float, str]]]:
    """Tick levels for n tiles: every 4th (or 8th) label always, the others where they fit
    (pyqtgraph drops the text of a finer level that would overlap), so 32 x 32 heads keep
    readable labels."""
    step = 1 if n <= 12 else 4 if n <= 48 else 8
    ticks = [(i * cell + 0.5, str(i)) for i in range(n)]
    return [ticks[::step], [t for i, t in enumerate(ticks) if i % step]]


def fit_ranges(w: float, h: float, pixels: QtCore.QRectF, margin: float = 1.02):
    """(x range, y range) that show a w x h grid whole in a view of `pixels`, in the view's own
    aspect: an aspect-locked ViewBox asked for a tall grid in a wide view would otherwise keep
    the width and crop the layers."""
    s = max(w / pixels.width(), h / pixels.height()) * margin  # view units per pixel
    half_w, half_h = pixels.width() * s / 2, pixels.height() * s / 2
    return (w / 2 - half_w, w / 2 + half_w), (h / 2 - half_h, h / 2 + half_h)
