"""An axis that labels matrix rows or columns with token labels.

Cell i spans [i, i + 1] in view coordinates, so its tick sits at i + 0.5. Only as many labels as
fit are drawn (every step-th, step in 1, 2, 5, 10, ...), so a 512-token axis stays readable and
zooming in brings every label back. Bottom labels are drawn rotated so that each key gets one
font height of room instead of a whole label's width.
"""

from __future__ import annotations

import heapq
import math

import pyqtgraph as pg
from PySide6 import QtCore, QtGui

MAX_LABEL_CHARS = 14
_STEPS = (1, 2, 5)


def short_label(label: str, limit: int = MAX_LABEL_CHARS) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "\u2026"


def nice_step(cells_per_label: float) -> int:
    """The smallest 1/2/5 x 10^k step that is at least `cells_per_label`."""
    if cells_per_label <= 1:
        return 1
    magnitude = 10 ** math.floor(math.log10(cells_per_label))
    for m in (*_STEPS, 10):
        if m * magnitude >= cells_per_label:
            return int(m * magnitude)
    return int(10 * magnitude)


_MEASURED: dict = {}  # the last labels measured: every axis of every view shows the same prompt


def _measured(labels: tuple[str, ...], metrics: QtGui.QFontMetricsF) -> tuple[tuple[str, ...], float]:
    """(shortened labels, widest "position:label" in pixels), computed once per prompt for all
    axes. A long prompt repeats its tokens: each distinct label is measured once."""
    hit = _MEASURED.get("labels")
    if hit is not None and hit[1] == metrics.height() and (hit[0] is labels or hit[0] == labels):
        return hit[2], hit[3]
    shown = tuple(short_label(x) for x in labels)
    # The widest label is among the longest: measure the 64 longest distinct ones (labels are cut
    # at MAX_LABEL_CHARS, so a label of many narrow letters cannot beat one of many wide ones by much).
    widest = max(map(metrics.horizontalAdvance, heapq.nlargest(64, set(shown), key=len)), default=0.0)
    if labels:
        widest += metrics.horizontalAdvance(f"{len(labels)}:")
    _MEASURED["labels"] = (labels, metrics.height(), shown, widest)
    return shown, widest


class TokenAxis(pg.AxisItem):
    """`orientation` 'left' (rows, inverted view) or 'bottom' (columns)."""

    def __init__(self, orientation: str, **kwargs):
        super().__init__(orientation, **kwargs)
        self._labels: tuple[str, ...] = ()
        self._shown: tuple[str, ...] = ()
        self._font = QtGui.QFont()
        self._font.setPointSizeF(8.0)
        self.setStyle(tickFont=self._font, autoExpandTextSpace=False)
        self._metrics = QtGui.QFontMetricsF(self._font)
        self._extent = 0.0
        self._widest = 0.0  # pixels of the widest "index:label"
        self._positions: tuple[int, ...] | None = None  # the number shown before label i (None: i)
        self._numbered = True

    # -- labels ---------------------------------------------------------------------------
    def set_labels(self, labels) -> bool:
        """Set the labels; returns False (and does nothing) when they did not change."""
        if labels is self._labels:
            return False
        labels = labels if type(labels) is tuple else tuple(map(str, labels))
        if labels == self._labels:
            return False
        self._labels = labels
        self._shown, self._widest = _measured(labels, self._metrics)  # widest "index:label"
        self._measure()
        return True

    def set_positions(self, positions=None, numbered: bool = True) -> None:
        """What thinned or zoomed labels are numbered by: `positions[i]` (the token a pooled or
        windowed column starts at) instead of the column index i; `numbered=False` shows the
        labels alone (labels that already say their positions)."""
        positions = None if positions is None else tuple(int(p) for p in positions)
        if (positions, bool(numbered)) != (self._positions, self._numbered):
            self._positions, self._numbered = positions, bool(numbered)
            self._measure()

    def _number(self, i: int) -> int:
        return self._positions[i] if self._positions is not None and i < len(self._positions) else i

    def _measure(self) -> None:
        widest = self._widest
        if self._labels and (self._positions or not self._numbered):  # another number, or none, before each label
            widest -= self._metrics.horizontalAdvance(f"{len(self._labels)}:")
            if self._numbered:
                widest += self._metrics.horizontalAdvance(f"{max(self._positions)}:")
        self._extent = widest + 10
        self._resize()
        self.picture = None
        self.update()

    def _resize(self) -> None:
        room = int(self._extent) + 4
        if self.label.isVisible():
            room += int(self.label.boundingRect().height() * 0.8) + 2  # the axis title beside the labels
        if self.orientation in ("left", "right"):
            self.setWidth(room)
        else:
            self.setHeight(room)

    def showLabel(self, show: bool = True):
        super().showLabel(show)
        if getattr(self, "_labels", ()):  # also called from AxisItem.__init__, before ours ran
            self._resize()

    def labels(self) -> tuple[str, ...]:
        return self._labels

    def visible_ticks(self) -> tuple[int, list[int]]:
        """(step, indices) of the labels drawn for the current zoom and size."""
        n = len(self._labels)
        view = self.linkedView()
        if n == 0 or view is None:
            return 1, []
        vertical = self.orientation in ("left", "right")
        (x0, x1), (y0, y1) = view.viewRange()
        lo, hi = (y0, y1) if vertical else (x0, x1)
        rect = view.sceneBoundingRect()
        length = rect.height() if vertical else rect.width()
        if hi <= lo or length <= 0:
            return 1, []
        px_per_cell = length / (hi - lo)
        step = nice_step(self._metrics.height() * 1.15 / px_per_cell)
        first = max(0, math.ceil(lo - 0.5))
        last = min(n - 1, math.floor(hi - 0.5))
        first = ((first + step - 1) // step) * step
        return step, list(range(first, last + 1, step))

    # -- drawing --------------------------------------------------------------------------
    def _pixel(self, value: float) -> float:
        view = self.linkedView()
        if self.orientation in ("left", "right"):
            return self.mapFromScene(view.mapViewToScene(QtCore.QPointF(0, value))).y()
        return self.mapFromScene(view.mapViewToScene(QtCore.QPointF(value, 0))).x()

    def generateDrawSpecs(self, p):
        if not self._labels or self.linkedView() is None:
            return super().generateDrawSpecs(p)
        bounds = self.mapRectFromParent(self.geometry())
        tick_len = 4
        if self.orientation == "left":
            edge = bounds.right()
            axis_spec = (self.pen(), QtCore.QPointF(edge, bounds.top()), QtCore.QPointF(edge, bounds.bottom()))
        else:
            edge = bounds.top()
            axis_spec = (self.pen(), QtCore.QPointF(bounds.left(), edge), QtCore.QPointF(bounds.right(), edge))
        step, indices = self.visible_ticks()
        ticks, texts = [], []
        pen = self.tickPen()
        h = self._metrics.height()
        # Positions are shown whenever some labels are not: thinned out, or zoomed in.
        indexed = bool(indices) and (step > 1 or indices[0] > 0 or indices[-1] < len(self._labels) - 1
                                     or self._positions is not None) and self._numbered
        for i in indices:
            pos = self._pixel(i + 0.5)
            text = f"{self._number(i)}:{self._shown[i]}" if indexed else self._shown[i]
            if self.orientation == "left":
                if not bounds.top() - 1 <= pos <= bounds.bottom() + 1:
                    continue
                ticks.append((pen, QtCore.QPointF(edge - tick_len, pos), QtCore.QPointF(edge, pos)))
                rect = QtCore.QRectF(bounds.left(), pos - h / 2, edge - tick_len - 2 - bounds.left(), h)
            else:
                if not bounds.left() - 1 <= pos <= bounds.right() + 1:
                    continue
                ticks.append((pen, QtCore.QPointF(pos, edge), QtCore.QPointF(pos, edge + tick_len)))
                # Rotated in drawPicture: the rect is in the rotated frame, anchored at (pos, edge).
                rect = QtCore.QRectF(pos, edge + tick_len + 2, self._extent, h)
            texts.append((rect, text))
        return axis_spec, ticks, texts

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):
        if not self._labels or (textSpecs and len(textSpecs[0]) == 3):
            return super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
        p.setRenderHint(p.RenderHint.Antialiasing, False)
        p.setRenderHint(p.RenderHint.TextAntialiasing, True)
        pen, p1, p2 = axisSpec
        p.setPen(pen)
        p.drawLine(p1, p2)
        for pen, a, b in tickSpecs:
            p.setPen(pen)
            p.drawLine(a, b)
        p.setFont(self._font)
        p.setPen(self.textPen())
        right = QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter
        for rect, text in textSpecs:
            if self.orientation == "left":
                p.drawText(rect, int(right), text)
                continue
            # Key labels read bottom-to-top, ending just under their tick.
            p.save()
            p.translate(rect.left(), rect.top())
            p.rotate(-90)
            p.drawText(QtCore.QRectF(-rect.width(), -rect.height() / 2, rect.width(), rect.height()), int(right), text)
            p.restore()
