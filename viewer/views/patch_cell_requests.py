"""The patching view's cells: a click reads one cell and selects its layer, head and position in
every view; where only the estimate is there (a long prompt), it asks the worker for the exact
patch of that cell, or of every cell between it and the last one clicked (shift-click), and
keeps the answers beside the estimate. Mixed into `PatchingView` (viewer/views/patching_view.py),
whose state, worker, grids and readout it uses."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.answers import same_request
from transformer_viewer.viewer.views.patch_cells import merged, selection_of


class CellRequests:
    """Mixin (before the Qt class): the click on a cell and the exact cells it asks for."""

    def _on_cell_clicked(self, row: int, col: int) -> None:
        region = bool(QtWidgets.QApplication.keyboardModifiers() & QtCore.Qt.KeyboardModifier.ShiftModifier)
        self.click(row, col, region=region)

    def click(self, row: int, col: int, region: bool = False) -> None:
        """Read cell (row, col), select its layer, head and position everywhere, and compute its
        exact patch when only the estimate is there (`region`: every cell between the last
        clicked one and this)."""
        grid = self.shown_grid()
        if grid is None:
            return
        anchor = self.clicked if region and self.clicked is not None else (row, col)
        self.clicked = (row, col)
        p = self.state.patching
        self.state.set_selection(**selection_of(grid, row, col, p.layer, self.state.n_head))
        if self.exact is None and self.estimate is not None and self._asked is not None:
            r0, r1 = sorted((anchor[0], row))
            c0, c1 = sorted((anchor[1], col))
            todo = tuple((r, c) for r in range(r0, r1 + 1) for c in range(c0, c1 + 1) if (r, c) not in self.cells)
            if todo:
                self._ask_cells(todo)
        self._show_readout()

    def _ask_cells(self, cells) -> None:
        import dataclasses

        from transformer_viewer.viewer.worker.patching import PatchCellsRequest

        base = {f.name: getattr(self._asked, f.name) for f in dataclasses.fields(self._asked) if f.name != "rid"}
        request = PatchCellsRequest(**{**base, "estimate": False}, cells=tuple(cells))
        self._pending_cells = request
        self.stop_button.setEnabled(True)
        self.worker.submit(request, on_result=self._on_cells, on_failure=self._on_failed)

    def _on_cells(self, answer) -> None:
        if not same_request(answer.request, self._pending_cells):
            self.dropped += 1
            return
        self._pending_cells = None
        self.stop_button.setEnabled(self._pending is not None)
        for r, c in answer.request.cells:
            self.cells[(r, c)] = float(answer.value.grid.raw[r, c])
        self.draw()

    def exact_grid(self):
        """The exact patches known: the whole grid, or the estimate's shape with the clicked cells."""
        if self.exact is not None:
            return self.exact
        if self.estimate is not None and self.cells:
            return merged(self.estimate, self.cells)
        return None

