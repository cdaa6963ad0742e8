"""A labelled heatmap: one matrix as an image, rows top to bottom, with a colour bar and hover readout.

Token (r, c) covers [c, c + 1] x [r, r + 1] in view coordinates and the y axis is inverted, so
row 0 is at the top (queries on rows, keys on columns for attention). A matrix may be pooled:
with `cell` > 1 each of its entries covers a cell x cell block of tokens (the attention
overview of a long prompt), while the labels, the axes, the selection and the hover stay per
token. One ImageItem is reused for every update and its levels are always set explicitly,
which keeps a 1024 x 1024 redraw cheap.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.heatmap_parts import (  # noqa: F401 - re-exported for the views
    COLORMAPS,
    DIVERGING_COLORMAP,
    LOG_FLOOR,
    HeatmapExport,
    format_value,
    get_colormap,
    log_display,
    pick_levels,
    plot_over_bar,
)
from transformer_viewer.viewer.views.token_axis import TokenAxis


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
        self._cell = 1  # tokens per matrix entry along each side
        self._pooling = "max"  # what a pooled entry holds: "max" or "mean" of its block
        self._size = (0, 0)  # (rows, cols) in tokens

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
        self.bottom_bar = plot_over_bar(self, self.graphics, self.hover_label, self.reset_button)

        scene = self.graphics.scene()
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)

    # -- data -----------------------------------------------------------------------------
    def set_data(self, matrix, row_labels=None, col_labels=None, *, levels=(0, 1), colormap: str | None = None,
                 log_scale: bool = False, diverging: bool = False, title: str = "",
                 row_name: str = "query", col_name: str = "key", cell: int = 1, pooling: str = "max") -> None:
        """Show `matrix` (R, C). `levels=None` takes them from the data (symmetric when diverging).
        With `cell` > 1 each entry covers cell x cell tokens (its block's `pooling`, "max" or
        "mean") and the labels name the tokens: ceil(len(labels) / cell) entries per side."""
        m = np.asarray(matrix)
        if m.ndim != 2:
            raise ValueError(f"a heatmap needs a 2-D matrix, got shape {m.shape}")
        m = np.ascontiguousarray(m, dtype=np.float32)
        R, C = m.shape
        cell = max(1, int(cell))
        rows = tuple(row_labels) if row_labels is not None else tuple(str(i) for i in range(R * cell))
        cols = tuple(col_labels) if col_labels is not None else tuple(str(i) for i in range(C * cell))
        if -(-len(rows) // cell) != R or -(-len(cols) // cell) != C:
            raise ValueError(f"{len(rows)} row and {len(cols)} column labels for a {R} x {C} matrix"
                             + (f" of {cell} x {cell} token cells" if cell > 1 else ""))
        size = (len(rows), len(cols))
        reshaped = size != self._size
        self._matrix, self._cell, self._pooling, self._size = m, cell, pooling, size
        self._row_labels, self._col_labels = rows, cols
        self._row_name, self._col_name = row_name, col_name
        self._diverging = diverging
        self._log = bool(log_scale)
        self._levels = pick_levels(m, levels, diverging)
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
            R, C = size
            self.view.setLimits(xMin=0, xMax=max(C, 1), yMin=0, yMax=max(R, 1),
                                minXRange=min(C, 1), minYRange=min(R, 1))
            self.reset_view()
        self._place_highlight()

    def shown_values(self, m: np.ndarray) -> np.ndarray:
        """What the image of values `m` shows: log10 of them (clipped at the floor) in log scale."""
        if not self._log:
            return m
        return np.log10(np.maximum(m, log_display(self._levels)[0]))

    def _render(self) -> None:
        m = self._matrix
        if self._log:
            _floor, levels, ticks = log_display(self._levels)
            shown = self.shown_values(m)
        else:
            shown, levels, ticks = m, self._levels, None
        if ticks != self._bar_ticks:  # rebuilding the bar's axis costs a repaint of its text
            self._bar_ticks = ticks
            self.bar.axis.setTicks(None if ticks is None else [ticks])
        if m.size == 0:
            shown = np.zeros((1, 1), dtype=np.float32)
        self.bar.setLevels(levels)
        self.image.setImage(shown, autoLevels=False, levels=levels)
        # A pooled matrix's last cells may be cut short by the prompt's end: they overhang the
        # view's limits by less than one cell, and the limits hide that part.
        self.image.setRect(QtCore.QRectF(0, 0, m.shape[1] * self._cell, m.shape[0] * self._cell))

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
        R, C = self._size
        if r is None or not 0 <= r < R:
            self._row_box.hide()
            return
        self._row_box.setRect(QtCore.QRectF(0, r, C, 1))
        self._row_box.show()

    def reset_view(self) -> None:
        R, C = self._size
        self.view.setRange(xRange=(0, max(C, 1)), yRange=(0, max(R, 1)), padding=0)

    def is_zoomed(self) -> bool:
        """Whether the view shows less than the whole matrix (zoomed or panned by the user)."""
        R, C = self._size
        (x0, x1), (y0, y1) = self.view.viewRange()
        eps = 1e-6 * max(R, C, 1)
        return x0 > eps or y0 > eps or x1 < max(C, 1) - eps or y1 < max(R, 1) - eps

    # -- what is shown --------------------------------------------------------------------
    def matrix(self) -> np.ndarray:
        """The matrix as given (linear values, also in log scale), float32 (R, C)."""
        return self._matrix

    def cell(self) -> int:
        """Tokens per matrix entry along each side (1: one entry per token)."""
        return self._cell

    def token_size(self) -> tuple[int, int]:
        """(rows, cols) in tokens."""
        return self._size

    def row_labels(self) -> tuple[str, ...]:
        return self._row_labels

    def col_labels(self) -> tuple[str, ...]:
        return self._col_labels

    def title(self) -> str:
        return self._texts[0] if self._texts else ""

    def export_target(self) -> QtWidgets.QGraphicsView:
        """The view that PNG/SVG export renders (the plot and colour bar, not the readout)."""
        return self.graphics

    def value_at(self, row: int, col: int) -> tuple[float, str]:
        """(value, what it is) at token (row, col): "" for the exact value, else the block it pools."""
        w = self._cell
        v = float(self._matrix[row // w, col // w])
        if w == 1:
            return v, ""
        R, C = self._size
        r0, c0 = row // w * w, col // w * w
        return v, (f"{self._pooling} of block {self._row_name} {r0}..{min(r0 + w, R) - 1} x "
                   f"{self._col_name} {c0}..{min(c0 + w, C) - 1}")

    def hover_text(self, row: int, col: int) -> str:
        R, C = self._size
        if not (0 <= row < R and 0 <= col < C):
            return ""
        v, pooled = self.value_at(row, col)
        return (f"{self._row_name} '{self._row_labels[row]}' ({row}) -> "
                f"{self._col_name} '{self._col_labels[col]}' ({col}): {format_value(v)}"
                + (f" ({pooled})" if pooled else ""))

    def cell_at(self, scene_pos) -> tuple[int, int] | None:
        """The (row, col) under a scene position, or None outside the matrix."""
        if not self.view.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.view.mapSceneToView(scene_pos)
        row, col = math.floor(p.y()), math.floor(p.x())
        R, C = self._size
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


def main_heatmap(view) -> HeatmapView | None:
    """The heatmap a view draws its matrix in (its `heatmap`, or the view itself), or None: what
    a figure's `region` zooms (`transformer-viewer export --region`)."""
    heatmap = view if isinstance(view, HeatmapView) else getattr(view, "heatmap", None)
    return heatmap if isinstance(heatmap, HeatmapView) else None
