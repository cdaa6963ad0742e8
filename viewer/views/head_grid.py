"""The "model view": every head's attention pattern as a thumbnail, layers on rows, heads on columns.

All thumbnails are tiles of one indexed image (one ImageItem, one upload; colour-table
indices on fixed levels, gaps transparent), each pooled from the trace's
overview (its max or mean pooling, so no full pattern is needed at any length) to at most
THUMB x THUMB, so that a sharp one-token pattern stays visible at 8k tokens. Masked heads are
greyed and crossed; the selected head has a bright frame. The wheel zooms and a drag pans, so
32 x 32 heads stay readable; the labels thin out to fit.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.grid_marks import GridMarks, fit_ranges, thinned_ticks
from transformer_viewer.viewer.views.heatmap_parts import LOG_FLOOR, get_colormap, plot_over_bar
from transformer_viewer.viewer.views.shown_refresh import RefreshWhenShown, when_shown
from transformer_viewer.viewer.views.thumbnails import (  # noqa: F401 - re-exported
    GAP,
    THUMB,
    colour_table,
    max_pool,
    mean_pool,
    thumb_size,
    tile,
    tile_indexed,
)


class HeadGridView(RefreshWhenShown, QtWidgets.QWidget):
    """`set_trace(trace)` (its overviews) or `set_patterns(attention (L, nh, T, T), mask (L, nh))`;
    emits `head_activated(layer, head)` on click. With a `ViewerState` it follows the state's
    trace (redrawn when shown, if its dock is closed), mask and selection, and a click selects
    the head."""

    head_activated = QtCore.Signal(int, int)
    hover_text_changed = QtCore.Signal(str)

    def __init__(self, state=None, parent=None):
        super().__init__(parent)
        self.state = state
        self._shape = (0, 0)  # (L, nh)
        self._mask = np.zeros((0, 0), dtype=bool)
        self._selected: tuple[int, int] | None = None
        self._thumbs = np.zeros((0, 0, 0, 0), dtype=np.float32)
        self._patterns: np.ndarray | None = None  # full patterns, when the trace has them (export)
        self._overviews = None  # (overview_max, overview_mean, cell, T) the thumbnails pool
        self._pooling = "max"
        self._log = False
        self._cmap_name = "viridis"
        self._cell = 1.0  # view units per tile, gap included; a tile is [0, 1) x [0, 1) after scaling
        self._hover = ""
        self._fitted = True  # every head in view; a zoom or pan by the user ends it

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
        self.view.sigResized.connect(lambda _v: self._refit())
        self.view.sigRangeChangedManually.connect(lambda *_a: setattr(self, "_fitted", False))
        self.image = pg.ImageItem(axisOrder="row-major")
        self.set_colormap(self._cmap_name)  # drawn as indices into its colour table, gaps transparent
        self.plot.addItem(self.image)

        self.marks = GridMarks(self.plot)

        self.hover_label = QtWidgets.QLabel(" ")
        self.pooling_combo = QtWidgets.QComboBox()
        self.pooling_combo.addItem("max of blocks", "max")
        self.pooling_combo.addItem("mean of blocks", "mean")
        self.pooling_combo.setToolTip("Each thumbnail pixel shows its block of the pattern by the largest weight "
                                      "(sharp heads stay visible) or the mean")
        self.pooling_combo.currentIndexChanged.connect(lambda _i: self.set_pooling(self.pooling_combo.currentData()))
        self.fit_button = QtWidgets.QToolButton(text="Fit")
        self.fit_button.setToolTip("Show every head again (the wheel zooms, a drag pans)")
        self.fit_button.clicked.connect(self.fit)
        plot_over_bar(self, self.graphics, self.hover_label, self.pooling_combo, self.fit_button)

        self.graphics.figure_extras = self._figure_colour_bar  # viewer/figure.py adds it to an export

        scene = self.graphics.scene()
        scene.sigMouseClicked.connect(self._on_mouse_clicked)
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        if state is not None:
            self.head_activated.connect(lambda layer, head: state.set_selection(layer=layer, head=head))
            state.trace_changed.connect(lambda _t: self.refresh())
            state.mask_changed.connect(self._on_mask)
            state.selection_changed.connect(lambda: self.set_selected(state.layer, state.head))
            self.set_selected(state.layer, state.head)
            self._on_trace(state.trace)

    @when_shown
    def refresh(self) -> None:
        """Thumbnails of the state's trace (nothing to do without a state)."""
        if self.state is not None:
            self._on_trace(self.state.trace)

    def _on_trace(self, trace) -> None:
        if trace is not None and (self._overviews is None or trace.overview_max is not self._overviews[0]):
            # The trace's own mask always matches its patterns, even when a newly loaded model
            # has already reshaped the state's mask.
            self.set_trace(trace)

    def _on_mask(self, mask) -> None:
        if mask.shape == self._shape:  # crosses at once; the patterns follow with the trace
            self.set_mask(mask)

    # -- data -----------------------------------------------------------------------------
    def set_patterns(self, attention, mask=None) -> None:
        """Thumbnails of full patterns (L, nh, T, T)."""
        a = np.asarray(attention)
        if a.ndim != 4 or a.shape[2] != a.shape[3]:
            raise ValueError(f"attention must be (L, nh, T, T), got shape {a.shape}")
        self.set_overviews(a, a, 1, a.shape[2], mask, full=a)

    def set_trace(self, trace) -> None:
        """Thumbnails of a trace's pooled overviews (its full patterns are not needed)."""
        self.set_overviews(trace.overview_max, trace.overview_mean, trace.overview_cell, trace.n_tokens,
                           trace.mask, full=trace.attention)

    def set_overviews(self, overview_max, overview_mean, cell: int, T: int, mask=None, full=None) -> None:
        """Thumbnails from (L, nh, n, n) overviews whose cells cover `cell` tokens of a T-token
        prompt; `full`: the (L, nh, T, T) patterns, when there are any, for .npy export."""
        self._overviews = (overview_max, overview_mean, int(cell), int(T))
        self._patterns = full
        L, nh = overview_max.shape[:2]
        self._thumbs = self._pool()
        old_layout = (self._shape, self._cell)
        self._shape = (L, nh)
        self._render()
        if (self._shape, self._cell) != old_layout:  # tiles moved: a new model or a new thumbnail size
            self._set_ticks()
            self.fit()
        mask = np.zeros((L, nh), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if not np.array_equal(mask, self._mask):  # a head toggle has drawn its cross already
            self.set_mask(mask)
        if self._selected is not None:
            self.set_selected(*self._selected)

    def _pool(self) -> np.ndarray:
        omax, omean, cell, T = self._overviews
        size = thumb_size(omax.shape[0] * omax.shape[1])
        if self._pooling == "mean":
            return mean_pool(omean, T, cell, size)
        return max_pool(omax, size)

    def set_pooling(self, pooling: str) -> None:
        """Thumbnails of each block's "max" (sharp patterns stay visible) or "mean"."""
        if pooling not in ("max", "mean"):
            raise ValueError(f"unknown pooling {pooling!r}; use max or mean")
        if self.pooling_combo.currentData() != pooling:
            self.pooling_combo.setCurrentIndex(self.pooling_combo.findData(pooling))
        if pooling != self._pooling:
            self._pooling = pooling
            if self._overviews is not None:
                self._thumbs = self._pool()
                self._render()

    def pooling(self) -> str:
        return self._pooling

    def _render(self) -> None:
        if self._thumbs.size == 0:
            return
        shown = self._thumbs
        if self._log:
            with np.errstate(invalid="ignore"):
                shown = np.log10(np.maximum(shown, LOG_FLOOR))
        img, P = tile_indexed(shown, self.levels())
        S = self._thumbs.shape[2]
        self._cell = P / S  # in view units a tile's content is 1 wide
        self.image.setImage(img, autoLevels=False, levels=None, lut=self._table)
        L, nh = self._shape
        self.image.setRect(QtCore.QRectF(0, 0, nh * self._cell, L * self._cell))

    def _set_ticks(self) -> None:
        L, nh = self._shape
        for axis, n in (("left", L), ("top", nh)):
            self.plot.getAxis(axis).setTicks(thinned_ticks(n, self._cell))

    def fit(self) -> None:
        """Show every head (again after a resize, until the user zooms or pans)."""
        L, nh = self._shape
        if not L:
            return
        w, h = nh * self._cell, L * self._cell
        m = max(w, h)  # room to pan around, in any aspect of the dock
        self.view.setLimits(xMin=-m, xMax=w + m, yMin=-m, yMax=h + m)
        self._fitted = True
        self._refit()

    def _refit(self) -> None:
        L, nh = self._shape
        pixels = self.view.boundingRect()
        if self._fitted and L and pixels.width() > 0 and pixels.height() > 0:
            x, y = fit_ranges(nh * self._cell, L * self._cell, pixels)
            self.view.setRange(xRange=x, yRange=y, padding=0)

    def set_mask(self, mask) -> None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != self._shape:
            raise ValueError(f"mask has shape {mask.shape}; the grid shows {self._shape}")
        self._mask = mask.copy()
        self.marks.set_mask(mask, self._cell)

    def set_selected(self, layer: int | None, head: int | None = None) -> None:
        L, nh = self._shape
        if layer is None or head is None or not (0 <= layer < L and 0 <= head < nh):
            self._selected = None if layer is None else (layer, head)
            self.marks.set_selected(None, None, self._cell)
            return
        self._selected = (int(layer), int(head))
        self.marks.set_selected(self._selected[0], self._selected[1], self._cell)

    @contextlib.contextmanager
    def _figure_colour_bar(self):
        """A colour bar beside the thumbnails while a figure is drawn: on screen the side panel
        has no room for one, on a page the colours need their scale."""
        low, high = self.levels()
        bar = pg.ColorBarItem(values=(low, high), colorMap=get_colormap(self._cmap_name), interactive=False, width=14)
        bar.axis.setLabel("log₁₀ attention weight" if self._log else "attention weight")
        self.graphics.addItem(bar, row=0, col=1)
        try:
            yield bar
        finally:
            self.graphics.removeItem(bar)

    def set_colormap(self, name: str) -> None:
        self._cmap_name = name
        self._table = colour_table(get_colormap(name))
        self.image.setLookupTable(self._table)

    def levels(self) -> tuple[float, float]:
        """The fixed levels the colours span: probabilities 0..1, or their log10 from LOG_FLOOR."""
        return (math.log10(LOG_FLOOR), 0.0) if self._log else (0.0, 1.0)

    def set_log_scale(self, on: bool) -> None:
        if bool(on) != self._log:
            self._log = bool(on)
            self._render()

    def colormap_name(self) -> str:
        return self._cmap_name

    def log_scale(self) -> bool:
        return self._log

    # -- what is shown --------------------------------------------------------------------
    def mask(self) -> np.ndarray:
        return self._mask.copy()

    def selected(self) -> tuple[int, int] | None:
        return self._selected

    def thumbnails(self) -> np.ndarray:
        """The pooled patterns drawn, (L, nh, S, S)."""
        return self._thumbs

    def matrix(self) -> np.ndarray:
        """What .npy export writes: the full patterns (L, nh, T, T) when there are any, else the
        thumbnails drawn (L, nh, S, S)."""
        if self._patterns is None:
            return self._thumbs
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
        side = min(140.0, max(40.0, 720.0 / max(L, nh))) * (1 + GAP)
        return QtCore.QSize(int(nh * side + 70), int(L * side + 90))
