"""A labelled heatmap: one matrix as an image, rows top to bottom, with a colour bar and hover readout.

Cell (r, c) covers [c, c + 1] x [r, r + 1] in view coordinates and the y axis is inverted, so
row 0 is at the top (queries on rows, keys on columns for attention). One ImageItem is reused
for every update and its levels are always set explicitly, which keeps a 1024 x 1024 redraw cheap.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.token_axis import TokenAxis

COLORMAPS = ("viridis", "inferno", "magma", "plasma", "cividis")
DIVERGING_COLORMAP = "CET-D1"
LOG_FLOOR = 1e-4


def get_colormap(name: str) -> pg.ColorMap:
    try:
        cmap = pg.colormap.get(name)
    except Exception:  # pyqtgraph raises FileNotFoundError or KeyError depending on the source
        cmap = None
    if cmap is None:
        raise ValueError(f"unknown colormap {name!r}; try one of {', '.join(COLORMAPS)} or {DIVERGING_COLORMAP}")
    return cmap


def format_value(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    if v != 0 and abs(v) < 5e-4:
        return f"{v:.2e}"
    return f"{v:.3f}"


class HeatmapView(QtWidgets.QWidget):
    """`set_data(matrix, row_labels, col_labels, ...)`; `matrix()` is what export writes."""

    hover_text_changed = QtCore.Signal(str)
    cell_clicked = QtCore.Signal(int, int)  # row, column

    def __init__(self, parent=None):
        super().__init__(parent)
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._row_labels: tuple[str, ...] = ()
        self._col_labels: tuple[str, ...] = ()
        self._row_name, self._col_name = "query", "key"
        self._levels = (0.0, 1.0)
        self._cmap_name = "viridis"
        self._sequential = "viridis"  # what a non-diverging set_data falls back to
        self._bar_ticks = None
        self._texts = None
        self._log = False
        self._diverging = False
        self._hover = ""
        self._highlight: int | None = None

        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.ci.setContentsMargins(4, 4, 4, 4)
        self._left = TokenAxis("left")
        self._bottom = TokenAxis("bottom")
        self.plot: pg.PlotItem = self.graphics.addPlot(axisItems={"left": self._left, "bottom": self._bottom})
        self.plot.invertY(True)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.view: pg.ViewBox = self.plot.getViewBox()
        self.view.setDefaultPadding(0.0)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.bar = pg.ColorBarItem(values=self._levels, colorMap=get_colormap(self._cmap_name), interactive=False, width=14)
        self.bar.setImageItem(self.image, insert_in=self.plot)
        self._row_box = QtWidgets.QGraphicsRectItem()
        pen = pg.mkPen((255, 60, 60), width=2)
        pen.setCosmetic(True)
        self._row_box.setPen(pen)
        self._row_box.setZValue(10)
        self._row_box.hide()
        self.plot.addItem(self._row_box, ignoreBounds=True)

        self.hover_label = QtWidgets.QLabel(" ")
        self.hover_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.reset_button = QtWidgets.QToolButton(text="Reset zoom")
        self.reset_button.setToolTip("Show the whole matrix again (wheel zooms, drag pans)")
        self.reset_button.clicked.connect(self.reset_view)
        bottom = QtWidgets.QHBoxLayout()
        bottom.setContentsMargins(4, 0, 4, 0)
        bottom.addWidget(self.hover_label, 1)
        bottom.addWidget(self.reset_button)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.graphics, 1)
        layout.addLayout(bottom)

        scene = self.graphics.scene()
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)

    # -- data -----------------------------------------------------------------------------
    def set_data(self, matrix, row_labels=None, col_labels=None, *, levels=(0, 1), colormap: str | None = None,
                 log_scale: bool = False, diverging: bool = False, title: str = "",
                 row_name: str = "query", col_name: str = "key") -> None:
        """Show `matrix` (R, C). `levels=None` takes them from the data (symmetric when diverging)."""
        m = np.asarray(matrix)
        if m.ndim != 2:
            raise ValueError(f"a heatmap needs a 2-D matrix, got shape {m.shape}")
        m = np.ascontiguousarray(m, dtype=np.float32)
        R, C = m.shape
        rows = tuple(row_labels) if row_labels is not None else tuple(str(i) for i in range(R))
        cols = tuple(col_labels) if col_labels is not None else tuple(str(i) for i in range(C))
        if len(rows) != R or len(cols) != C:
            raise ValueError(f"{len(rows)} row and {len(cols)} column labels for a {R} x {C} matrix")
        reshaped = m.shape != self._matrix.shape
        self._matrix = m
        self._row_labels, self._col_labels = rows, cols
        self._row_name, self._col_name = row_name, col_name
        self._diverging = diverging
        self._log = bool(log_scale)
        self._levels = self._pick_levels(m, levels, diverging)
        if colormap is None:
            colormap = DIVERGING_COLORMAP if diverging else self._sequential
        self.set_colormap(colormap)
        self._left.set_labels(rows)
        self._bottom.set_labels(cols)
        if (title, row_name, col_name) != self._texts:  # re-laying out text is the slow part of a redraw
            self._texts = (title, row_name, col_name)
            self.plot.setTitle(title or None)
            self._left.setLabel(row_name)
            self._bottom.setLabel(col_name)
        self._render()
        if reshaped:
            self.view.setLimits(xMin=0, xMax=max(C, 1), yMin=0, yMax=max(R, 1),
                                minXRange=min(C, 1), minYRange=min(R, 1))
            self.reset_view()
        self._place_highlight()

    @staticmethod
    def _pick_levels(m: np.ndarray, levels, diverging: bool) -> tuple[float, float]:
        if levels is not None:
            lo, hi = float(levels[0]), float(levels[1])
        elif m.size == 0 or not np.isfinite(m).any():
            lo, hi = 0.0, 1.0
        elif diverging:
            a = float(np.nanmax(np.abs(m)))
            lo, hi = -a, a
        else:
            lo, hi = float(np.nanmin(m)), float(np.nanmax(m))
        if not hi > lo:
            hi = lo + 1e-6
        return lo, hi

    def _render(self) -> None:
        m = self._matrix
        if self._log:
            floor = max(LOG_FLOOR, self._levels[0]) if self._levels[0] > 0 else LOG_FLOOR
            top = self._levels[1] if self._levels[1] > floor else 1.0
            shown = np.log10(np.maximum(m, floor))
            levels = (math.log10(floor), math.log10(top))
            ticks = [(float(e), f"{10.0 ** e:g}") for e in range(math.ceil(levels[0]), math.floor(levels[1]) + 1)]
        else:
            shown, levels, ticks = m, self._levels, None
        if ticks != self._bar_ticks:  # rebuilding the bar's axis costs a repaint of its text
            self._bar_ticks = ticks
            self.bar.axis.setTicks(None if ticks is None else [ticks])
        if m.size == 0:
            shown = np.zeros((1, 1), dtype=np.float32)
        self.bar.setLevels(levels)
        self.image.setImage(shown, autoLevels=False, levels=levels)
        self.image.setRect(QtCore.QRectF(0, 0, m.shape[1], m.shape[0]))

    # -- appearance -----------------------------------------------------------------------
    def set_colormap(self, name: str) -> None:
        if name == self._cmap_name:
            return
        cmap = get_colormap(name)
        self._cmap_name = name
        if name != DIVERGING_COLORMAP:
            self._sequential = name
        self.bar.setColorMap(cmap)

    def colormap_name(self) -> str:
        return self._cmap_name

    def set_log_scale(self, on: bool) -> None:
        if bool(on) != self._log:
            self._log = bool(on)
            self._render()

    def log_scale(self) -> bool:
        return self._log

    def levels(self) -> tuple[float, float]:
        """The levels of the displayed image (log10 of the value range in log scale)."""
        return tuple(self.image.getLevels())

    def highlight_row(self, row: int | None) -> None:
        self._highlight = None if row is None else int(row)
        self._place_highlight()

    def highlighted_row(self) -> int | None:
        return self._highlight

    def _place_highlight(self) -> None:
        r = self._highlight
        R, C = self._matrix.shape
        if r is None or not 0 <= r < R:
            self._row_box.hide()
            return
        self._row_box.setRect(QtCore.QRectF(0, r, C, 1))
        self._row_box.show()

    def reset_view(self) -> None:
        R, C = self._matrix.shape
        self.view.setRange(xRange=(0, max(C, 1)), yRange=(0, max(R, 1)), padding=0)

    # -- what is shown --------------------------------------------------------------------
    def matrix(self) -> np.ndarray:
        """The matrix as given (linear values, also in log scale), float32 (R, C)."""
        return self._matrix

    def row_labels(self) -> tuple[str, ...]:
        return self._row_labels

    def col_labels(self) -> tuple[str, ...]:
        return self._col_labels

    def title(self) -> str:
        return self._texts[0] if self._texts else ""

    def export_target(self) -> QtWidgets.QGraphicsView:
        """The view that PNG/SVG export renders (the plot and colour bar, not the readout)."""
        return self.graphics

    def hover_text(self, row: int, col: int) -> str:
        R, C = self._matrix.shape
        if not (0 <= row < R and 0 <= col < C):
            return ""
        v = float(self._matrix[row, col])
        return (f"{self._row_name} '{self._row_labels[row]}' ({row}) -> "
                f"{self._col_name} '{self._col_labels[col]}' ({col}): {format_value(v)}")

    def cell_at(self, scene_pos) -> tuple[int, int] | None:
        """The (row, col) under a scene position, or None outside the matrix."""
        if not self.view.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.view.mapSceneToView(scene_pos)
        row, col = math.floor(p.y()), math.floor(p.x())
        R, C = self._matrix.shape
        if 0 <= row < R and 0 <= col < C:
            return row, col
        return None

    def cell_scene_pos(self, row: int, col: int) -> QtCore.QPointF:
        """Scene position of a cell's centre (tests use it to aim the mouse)."""
        return self.view.mapViewToScene(QtCore.QPointF(col + 0.5, row + 0.5))

    # -- mouse ----------------------------------------------------------------------------
    def _on_mouse_moved(self, scene_pos) -> None:
        cell = self.cell_at(scene_pos)
        self._set_hover(self.hover_text(*cell) if cell else "")

    def _set_hover(self, text: str) -> None:
        if text != self._hover:
            self._hover = text
            self.hover_label.setText(text or " ")
            self.hover_text_changed.emit(text)

    def leaveEvent(self, event: QtCore.QEvent) -> None:
        self._set_hover("")
        super().leaveEvent(event)

    def _on_mouse_clicked(self, event) -> None:
        if event.button() != QtCore.Qt.MouseButton.LeftButton or event.double():
            return
        cell = self.cell_at(event.scenePos())
        if cell is not None:
            self.cell_clicked.emit(*cell)

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(640, 600)


class HeatmapExport:
    """The export protocol (export_target, matrix, row_labels, col_labels) of a view whose
    picture is its `self.heatmap`; mixed in before the Qt base class."""

    def export_target(self):
        return self.heatmap.export_target()

    def matrix(self) -> np.ndarray:
        return self.heatmap.matrix()

    def row_labels(self):
        return self.heatmap.row_labels()

    def col_labels(self):
        return self.heatmap.col_labels()
