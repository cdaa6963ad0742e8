"""The "model view": every head's attention pattern as a thumbnail, layers on rows, heads on columns.

All thumbnails are tiles of one image (one ImageItem, one upload), each max-pooled to at most
THUMB x THUMB so that a sharp one-token pattern stays visible at 1024 tokens. Masked heads are
greyed and crossed; the selected head has a bright frame.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from transformer_viewer.viewer.views.heatmap import LOG_FLOOR, get_colormap

THUMB = 64  # pixels per thumbnail side, at most
GAP = 0.12  # space between tiles, as a fraction of a tile


def max_pool(attention: np.ndarray, size: int = THUMB) -> np.ndarray:
    """(L, nh, T, T) -> (L, nh, S, S) float32 with S <= size, each cell the max of its block."""
    L, nh, T, T2 = attention.shape
    k = max(1, math.ceil(max(T, T2) / size))
    if k == 1:
        return np.asarray(attention, dtype=np.float32)
    S, S2 = math.ceil(T / k), math.ceil(T2 / k)
    if (S * k, S2 * k) != (T, T2):
        padded = np.zeros((L, nh, S * k, S2 * k), dtype=attention.dtype)
        padded[:, :, :T, :T2] = attention
        attention = padded
    a = np.ascontiguousarray(attention)
    if a.dtype == np.float16:
        # numpy has no fast float16 max; for non-negative halves the bit patterns sort like the
        # values, so take the max as uint16. A negative value (sign bit) would win: then redo.
        pooled = _pool(a.view(np.uint16), L, nh, S, S2, k)
        if not (pooled >= 0x8000).any():
            return pooled.view(np.float16).astype(np.float32)
        a = a.astype(np.float32)
    return _pool(a, L, nh, S, S2, k).astype(np.float32)


def _pool(a: np.ndarray, L: int, nh: int, S: int, S2: int, k: int) -> np.ndarray:
    # Rows first: k whole rows reduce element-wise (vectorised), then k-wide runs within a row.
    rows = a.reshape(L, nh, S, k, S2 * k).max(axis=3)  # (L, nh, S, S2 * k)
    return rows.reshape(L, nh, S, S2, k).max(axis=4)  # (L, nh, S, S2)


def tile(thumbs: np.ndarray) -> tuple[np.ndarray, int]:
    """(L, nh, S, S) -> one (L * P, nh * P) image with NaN gaps, P = S + gap pixels."""
    L, nh, S, S2 = thumbs.shape
    gap = max(1, round(GAP * S))
    P = max(S, S2) + gap
    out = np.full((L * P, nh * P), np.nan, dtype=np.float32)
    view = out.reshape(L, P, nh, P)  # (L, P, nh, P)
    view[:, :S, :, :S2] = thumbs.transpose(0, 2, 1, 3)  # (L, S, nh, S)
    return out, P


class HeadGridView(QtWidgets.QWidget):
    """`set_patterns(attention (L, nh, T, T), mask (L, nh))`; emits `head_activated(layer, head)` on
    click. With a `ViewerState` it follows the state's trace, mask and selection, and a click
    selects the head."""

    head_activated = QtCore.Signal(int, int)
    hover_text_changed = QtCore.Signal(str)

    def __init__(self, state=None, parent=None):
        super().__init__(parent)
        self.state = state
        self._shape = (0, 0)  # (L, nh)
        self._mask = np.zeros((0, 0), dtype=bool)
        self._selected: tuple[int, int] | None = None
        self._thumbs = np.zeros((0, 0, 0, 0), dtype=np.float32)
        self._patterns: np.ndarray | None = None
        self._log = False
        self._cmap_name = "viridis"
        self._cell = 1.0  # view units per tile, gap included; a tile is [0, 1) x [0, 1) after scaling
        self._hover = ""

        self.graphics = pg.GraphicsLayoutWidget()
        self.plot: pg.PlotItem = self.graphics.addPlot()
        self.plot.invertY(True)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setAspectLocked(True)
        self.plot.showAxis("top")
        self.plot.hideAxis("bottom")
        self.plot.getAxis("left").setLabel("layer")
        self.plot.getAxis("top").setLabel("head")
        self.view: pg.ViewBox = self.plot.getViewBox()
        self.view.setDefaultPadding(0.01)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(get_colormap(self._cmap_name))
        self.plot.addItem(self.image)

        self._masked_fill = QtWidgets.QGraphicsPathItem()
        self._masked_fill.setBrush(QtGui.QColor(128, 128, 128, 170))
        self._masked_fill.setPen(QtGui.QPen(QtCore.Qt.PenStyle.NoPen))
        self._crosses = QtWidgets.QGraphicsPathItem()
        cross_pen = pg.mkPen((235, 50, 50), width=2)
        cross_pen.setCosmetic(True)
        self._crosses.setPen(cross_pen)
        self._frame = QtWidgets.QGraphicsRectItem()
        frame_pen = pg.mkPen((255, 255, 255), width=3)
        frame_pen.setCosmetic(True)
        self._frame.setPen(frame_pen)
        self._frame.hide()
        for z, item in enumerate((self._masked_fill, self._crosses, self._frame), start=5):
            item.setZValue(z)
            self.plot.addItem(item, ignoreBounds=True)

        self.hover_label = QtWidgets.QLabel(" ")
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.graphics, 1)
        layout.addWidget(self.hover_label)

        scene = self.graphics.scene()
        scene.sigMouseClicked.connect(self._on_mouse_clicked)
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        if state is not None:
            self.head_activated.connect(lambda layer, head: state.set_selection(layer=layer, head=head))
            state.trace_changed.connect(self._on_trace)
            state.mask_changed.connect(self._on_mask)
            state.selection_changed.connect(lambda: self.set_selected(state.layer, state.head))
            self.set_selected(state.layer, state.head)
            self._on_trace(state.trace)

    def _on_trace(self, trace) -> None:
        if trace is not None and trace.attention is not self._patterns:
            # The trace's own mask always matches its patterns, even when a newly loaded model
            # has already reshaped the state's mask.
            self.set_patterns(trace.attention, trace.mask)

    def _on_mask(self, mask) -> None:
        if mask.shape == self._shape:  # crosses at once; the patterns follow with the trace
            self.set_mask(mask)

    # -- data -----------------------------------------------------------------------------
    def set_patterns(self, attention, mask=None) -> None:
        a = np.asarray(attention)
        if a.ndim != 4 or a.shape[2] != a.shape[3]:
            raise ValueError(f"attention must be (L, nh, T, T), got shape {a.shape}")
        L, nh = a.shape[:2]
        self._patterns = a
        self._thumbs = max_pool(a)
        old_layout = (self._shape, self._cell)
        self._shape = (L, nh)
        self._render()
        if (self._shape, self._cell) != old_layout:  # tiles moved: a new model or a new thumbnail size
            self._set_ticks()
            self.view.autoRange(padding=0.01)
        mask = np.zeros((L, nh), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if not np.array_equal(mask, self._mask):  # a head toggle has drawn its cross already
            self.set_mask(mask)
        if self._selected is not None:
            self.set_selected(*self._selected)

    def _render(self) -> None:
        if self._thumbs.size == 0:
            return
        img, P = tile(self._thumbs)
        S = self._thumbs.shape[2]
        self._cell = P / S  # in view units a tile's content is 1 wide
        if self._log:
            with np.errstate(invalid="ignore"):
                img = np.log10(np.maximum(img, LOG_FLOOR))  # NaN gaps stay NaN
            levels = (math.log10(LOG_FLOOR), 0.0)
        else:
            levels = (0.0, 1.0)
        self.image.setImage(img, autoLevels=False, levels=levels)
        L, nh = self._shape
        self.image.setRect(QtCore.QRectF(0, 0, nh * self._cell, L * self._cell))

    def _set_ticks(self) -> None:
        L, nh = self._shape
        c = self._cell
        self.plot.getAxis("left").setTicks([[(r * c + 0.5, str(r)) for r in range(L)]])
        self.plot.getAxis("top").setTicks([[(h * c + 0.5, str(h)) for h in range(nh)]])

    def set_mask(self, mask) -> None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != self._shape:
            raise ValueError(f"mask has shape {mask.shape}; the grid shows {self._shape}")
        self._mask = mask.copy()
        fill, cross = QtGui.QPainterPath(), QtGui.QPainterPath()
        for layer, head in zip(*np.nonzero(mask), strict=True):
            x, y = head * self._cell, layer * self._cell
            fill.addRect(QtCore.QRectF(x, y, 1, 1))
            cross.moveTo(x, y)
            cross.lineTo(x + 1, y + 1)
            cross.moveTo(x + 1, y)
            cross.lineTo(x, y + 1)
        self._masked_fill.setPath(fill)
        self._crosses.setPath(cross)

    def set_selected(self, layer: int | None, head: int | None = None) -> None:
        L, nh = self._shape
        if layer is None or head is None or not (0 <= layer < L and 0 <= head < nh):
            self._selected = None if layer is None else (layer, head)
            self._frame.hide()
            return
        self._selected = (int(layer), int(head))
        pad = 0.04
        self._frame.setRect(QtCore.QRectF(head * self._cell - pad, layer * self._cell - pad, 1 + 2 * pad, 1 + 2 * pad))
        self._frame.show()

    def set_colormap(self, name: str) -> None:
        self._cmap_name = name
        self.image.setColorMap(get_colormap(name))

    def set_log_scale(self, on: bool) -> None:
        if bool(on) != self._log:
            self._log = bool(on)
            self._render()

    # -- what is shown --------------------------------------------------------------------
    def mask(self) -> np.ndarray:
        return self._mask.copy()

    def selected(self) -> tuple[int, int] | None:
        return self._selected

    def thumbnails(self) -> np.ndarray:
        """The pooled patterns drawn, (L, nh, S, S)."""
        return self._thumbs

    def matrix(self) -> np.ndarray:
        """What .npy export writes: the full patterns (L, nh, T, T)."""
        if self._patterns is None:
            return np.zeros((0, 0, 0, 0), dtype=np.float32)
        return np.asarray(self._patterns, dtype=np.float32)

    def row_labels(self):
        return None

    def col_labels(self):
        return None

    def export_target(self) -> QtWidgets.QGraphicsView:
        return self.graphics

    def head_at(self, scene_pos) -> tuple[int, int] | None:
        if not self.view.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.view.mapSceneToView(scene_pos)
        L, nh = self._shape
        head, layer = math.floor(p.x() / self._cell), math.floor(p.y() / self._cell)
        if not (0 <= layer < L and 0 <= head < nh):
            return None
        # Clicks in the gap between tiles belong to no head.
        if p.x() - head * self._cell > 1 or p.y() - layer * self._cell > 1:
            return None
        return layer, head

    def head_scene_pos(self, layer: int, head: int) -> QtCore.QPointF:
        return self.view.mapViewToScene(QtCore.QPointF(head * self._cell + 0.5, layer * self._cell + 0.5))

    # -- mouse ----------------------------------------------------------------------------
    def _on_mouse_clicked(self, event) -> None:
        if event.button() != QtCore.Qt.MouseButton.LeftButton:
            return
        hit = self.head_at(event.scenePos())
        if hit is not None:
            self.head_activated.emit(*hit)

    def _on_mouse_moved(self, scene_pos) -> None:
        hit = self.head_at(scene_pos)
        text = ""
        if hit is not None:
            layer, head = hit
            text = f"layer {layer} head {head}" + (" (masked)" if self._mask[layer, head] else "") + ": click to open"
        if text != self._hover:
            self._hover = text
            self.hover_label.setText(text or " ")
            self.hover_text_changed.emit(text)

    def sizeHint(self) -> QtCore.QSize:
        """Room for square thumbnails of 40..140 px for the current layers x heads."""
        L, nh = self._shape
        if not L:
            return QtCore.QSize(520, 520)
        tile = min(140.0, max(40.0, 720.0 / max(L, nh))) * (1 + GAP)
        return QtCore.QSize(int(nh * tile + 70), int(L * tile + 90))
