"""A heatmap that zooms like a map: a pooled overview of the whole matrix underneath, and one
full-resolution tile of the visible part drawn over it at its place.

The overview is `HeatmapView`'s matrix (each entry a cell x cell block of tokens); the tile is
a second ImageItem with a rect in token coordinates, coloured through the same colour bar and
levels. `visible_changed` fires once the view has stopped moving for `debounce_ms`, so a drag
or a wheel spin asks for one tile, not one per frame. What asks for tiles is
`viewer/views/tile_loader.py`.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.heatmap import HeatmapView

DEBOUNCE_MS = 80


class ZoomHeatmap(HeatmapView):
    """Also selects a key column: a Shift+click marks it (`key_clicked`), at every zoom."""

    visible_changed = QtCore.Signal()
    key_clicked = QtCore.Signal(int)

    def __init__(self, parent=None, debounce_ms: int = DEBOUNCE_MS):
        super().__init__(parent)
        self._tile: tuple[np.ndarray, tuple[int, int], tuple[int, int]] | None = None
        self.tile_image = pg.ImageItem(axisOrder="row-major")
        self.tile_image.setZValue(1)  # over the overview, under the selection box
        self.tile_image.hide()
        self.plot.addItem(self.tile_image, ignoreBounds=True)
        self.bar.setImageItem([self.image, self.tile_image])  # one colour map and levels for both
        self._debounce = QtCore.QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(debounce_ms)
        self._debounce.timeout.connect(self.visible_changed)
        self.view.sigRangeChanged.connect(lambda *_a: self._debounce.start())
        self._key: int | None = None
        self._col_box = QtWidgets.QGraphicsRectItem()
        pen = pg.mkPen((255, 160, 40), width=2)
        pen.setCosmetic(True)
        self._col_box.setPen(pen)
        self._col_box.setZValue(10)
        self._col_box.hide()
        self.plot.addItem(self._col_box, ignoreBounds=True)
        self.detail_label = QtWidgets.QLabel("")
        self.detail_label.setToolTip("What the picture shows: the pooled overview of the whole matrix, or the "
                                     "visible part at full resolution. The wheel zooms, a drag pans; a click "
                                     "selects the query row, Shift+click marks a key column")
        self.bottom_bar.insertWidget(1, self.detail_label)  # beside Reset zoom

    # -- what is visible ------------------------------------------------------------------
    def visible_tokens(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """((r0, r1), (c0, c1)): the token rows and columns at least partly in view, clamped."""
        (x0, x1), (y0, y1) = self.view.viewRange()
        R, C = self.token_size()

        def span(lo: float, hi: float, n: int) -> tuple[int, int]:
            a, b = max(0, math.floor(lo)), min(n, math.ceil(hi))
            return (a, b) if b > a else (0, 0)

        return span(y0, y1, R), span(x0, x1, C)

    def set_visible_tokens(self, rows: tuple[int, int], cols: tuple[int, int]) -> None:
        """Zoom to show token rows rows[0]..rows[1]-1 and columns cols[0]..cols[1]-1."""
        self.view.setRange(xRange=cols, yRange=rows, padding=0)

    # -- the key column -------------------------------------------------------------------
    def highlight_col(self, col: int | None) -> None:
        self._key = None if col is None else int(col)
        R, C = self.token_size()
        if self._key is None or not 0 <= self._key < C:
            self._col_box.hide()
            return
        self._col_box.setRect(QtCore.QRectF(self._key, 0, 1, R))
        self._col_box.show()

    def highlighted_col(self) -> int | None:
        return self._key

    def _on_mouse_clicked(self, event) -> None:
        shift = bool(event.modifiers() & QtCore.Qt.KeyboardModifier.ShiftModifier)
        if not shift or event.button() != QtCore.Qt.MouseButton.LeftButton:
            super()._on_mouse_clicked(event)
            return
        cell = self.cell_at(event.scenePos())
        if cell is not None:
            self.highlight_col(None if cell[1] == self._key else cell[1])  # a second Shift+click clears it
            self.key_clicked.emit(cell[1])

    # -- the tile -------------------------------------------------------------------------
    def set_data(self, *args, **kwargs) -> None:
        """As HeatmapView's; the tile drawn over the previous matrix is gone."""
        self._tile = None
        self.tile_image.hide()
        super().set_data(*args, **kwargs)
        self.highlight_col(self._key)  # kept across heads and traces, like the query row
        self.show_detail()

    def show_detail(self, waiting: bool = False) -> None:
        """Say what the picture shows: the overview's blocks, a tile, or a tile on its way."""
        w = self.cell()
        if self._tile is not None:
            _t, (r0, r1), (c0, c1) = self._tile
            text = f"full resolution: rows {r0}..{r1 - 1}, columns {c0}..{c1 - 1}"
        elif w == 1:
            text = ""
        elif waiting:
            text = "computing full resolution…"
        else:
            text = f"overview: {self._pooling} of {w} x {w}-token blocks; zoom in for single tokens"
        if text != self.detail_label.text():
            self.detail_label.setText(text)

    def set_tile(self, tile, rows: tuple[int, int], cols: tuple[int, int]) -> None:
        """Draw `tile` (rows[1] - rows[0], cols[1] - cols[0]) exact values at its place."""
        t = np.ascontiguousarray(tile, dtype=np.float32)
        (r0, r1), (c0, c1) = rows, cols
        if t.shape != (r1 - r0, c1 - c0):
            raise ValueError(f"a tile of shape {t.shape} cannot cover rows {r0}..{r1}, columns {c0}..{c1}")
        self._tile = (t, (int(r0), int(r1)), (int(c0), int(c1)))
        if self._diverging and t.size and np.isfinite(t).any():
            # Levels taken from a pooled overview of means can be far narrower than single
            # tokens' values: widen them (symmetrically) so the tile is not saturated.
            a = float(np.nanmax(np.abs(t)))
            if a > self._levels[1]:
                self._levels = (-a, a)
                self._render()  # the overview on the same scale, and the tile
                self.show_detail()
                return
        self._render_tile()
        self.show_detail()

    def clear_tile(self) -> None:
        self._tile = None
        self.tile_image.hide()
        self.show_detail()

    def tile(self) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]] | None:
        """(values, rows, cols) of the tile drawn, or None."""
        return self._tile

    def _render(self) -> None:
        super()._render()
        self._render_tile()

    def _render_tile(self) -> None:
        if self._tile is None or self._tile[0].size == 0:
            self.tile_image.hide()
            return
        t, (r0, r1), (c0, c1) = self._tile
        self.tile_image.setImage(self.shown_values(t), autoLevels=False, levels=self.levels())
        self.tile_image.setRect(QtCore.QRectF(c0, r0, c1 - c0, r1 - r0))
        self.tile_image.show()

    def value_at(self, row: int, col: int) -> tuple[float, str]:
        if self._tile is not None:
            t, (r0, r1), (c0, c1) = self._tile
            if r0 <= row < r1 and c0 <= col < c1:
                return float(t[row - r0, col - c0]), ""
        return super().value_at(row, col)
