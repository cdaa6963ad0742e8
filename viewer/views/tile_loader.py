"""Asks for the full-resolution tile a zoomed `ZoomHeatmap` shows, and draws it when it comes.

When few enough tokens are in view (at most MAX_TILE a side) and the overview is pooled, the
visible rectangle, snapped outward to SNAP tokens and clamped to the matrix, is wanted at full
resolution. It comes from `local(rows, cols)` at once when the full arrays are at hand, or
from the worker as `request(rows, cols)`. Tile requests of one kind supersede each other, so
a pan that moves on cancels the tile it no longer needs; an answer is drawn only if it is the
one for the current source (`key`, checked against the result's own `source`) and rectangle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from PySide6 import QtCore

MAX_TILE = 512  # tokens per side of a full-resolution tile, at most (about)
SNAP = 32  # tile edges snap to multiples of this, so small pans reuse the tile


def wanted_tile(visible, size: tuple[int, int], cell: int, max_side: int = MAX_TILE,
                snap: int = SNAP) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The tile to show for `visible` ((r0, r1), (c0, c1)) tokens, or None: the overview is
    exact (cell 1), nothing is in view, or more than `max_side` tokens are (keep the overview)."""
    (r0, r1), (c0, c1) = visible
    if cell <= 1 or r1 <= r0 or c1 <= c0 or r1 - r0 > max_side or c1 - c0 > max_side:
        return None
    R, C = size
    return ((r0 // snap * snap, min(R, -(-r1 // snap) * snap)),
            (c0 // snap * snap, min(C, -(-c1 // snap) * snap)))


def covers(outer, inner) -> bool:
    (a0, a1), (b0, b1) = outer
    (c0, c1), (d0, d1) = inner
    return a0 <= c0 and c1 <= a1 and b0 <= d0 and d1 <= b1


class TileLoader(QtCore.QObject):
    """Keeps `heatmap`'s tile in step with its view. `set_source` names what is shown."""

    tile_drawn = QtCore.Signal()

    def __init__(self, heatmap, worker=None, parent=None):
        super().__init__(parent)
        self.heatmap = heatmap
        self.worker = worker
        self.key: Any = None
        self._local: Callable[[tuple, tuple], np.ndarray] | None = None
        self._request: Callable[[tuple, tuple], Any] | None = None
        self._pending: tuple | None = None  # (key, rows, cols) asked of the worker, not yet answered
        self.dropped = 0  # answers for a source or rectangle no longer shown
        self.requested = 0
        heatmap.visible_changed.connect(self.update)

    def set_source(self, key, local=None, request=None) -> None:
        """What tiles are cut from: `local(rows, cols) -> ndarray`, or the worker request
        `request(rows, cols)`, whose result's `source` must equal `key`; neither: no tiles."""
        self.key, self._local, self._request = key, local, request
        self._pending = None
        self.update()

    def update(self) -> None:
        hm = self.heatmap
        want = wanted_tile(hm.visible_tokens(), hm.token_size(), hm.cell())
        if want is None:
            hm.clear_tile()
            return
        shown = hm.tile()
        if shown is not None and covers(shown[1:], want):
            return
        rows, cols = want
        if self._local is not None:
            hm.set_tile(self._local(rows, cols), rows, cols)
            self.tile_drawn.emit()
        elif self._request is not None and self.worker is not None:
            if self._pending is not None and self._pending[0] == self.key and covers(self._pending[1:], want):
                return  # the tile on its way covers the view
            self._pending = (self.key, rows, cols)
            self.requested += 1
            hm.show_detail(waiting=True)
            self.worker.submit(self._request(rows, cols), on_result=lambda answer: self.arrive(answer.value),
                               on_failure=lambda _f: self._forget())
        else:
            hm.clear_tile()

    def _forget(self) -> None:
        self._pending = None

    def arrive(self, value) -> bool:
        """Draw a worker's tile if it is for the current source and still wanted; False: dropped."""
        pending = self._pending
        if value.source != self.key or pending is None or (value.rows, value.cols) != pending[1:]:
            self.dropped += 1
            return False
        self._pending = None
        self.heatmap.set_tile(value.tile, value.rows, value.cols)
        self.tile_drawn.emit()
        return True
