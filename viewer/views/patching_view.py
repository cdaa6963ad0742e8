"""Activation patching: the clean prompt (the state's) and a corrupted one, one activation of one
run written into the other, and how much of the clean answer comes back, for every cell of one
kind (model/analysis/patching/: the embedding, the residual stream, attention and MLP outputs by
layer x position; each head's output, pattern, queries, keys or values by layer x head; one
layer's heads by position; path patching into one receiver head).

The grid is a heatmap on a diverging scale centred on 0, normalised (corrupted = 0, clean = 1)
or raw. Where attribution patching estimates a kind, the estimate comes first, marked as such,
then the exact grid; above the long-prompt threshold only the estimate is computed and a click
(or a shift-click, for the region between it and the last click) computes the exact patch of
those cells. A click reads one cell, its exact value beside the estimate, and selects its layer,
head and position in every view. Computed on the worker (PatchRequest, PatchCellsRequest) while
the view is shown, with progress; Stop or the status bar's Cancel stops it within one batch of
patched runs, and a new prompt supersedes it. The state's head mask and feature clamps apply to
both runs and every patched run: a change of either asks again, and the title says how many
clamps the grid is under. Its data exports (.npy/.csv) hold the shown grid's raw metric, as
`transformer-viewer patch` and `export --view patching` write it.
"""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.patch_setup import BY_POSITION, length_line
from transformer_viewer.viewer.views.answers import same_request
from transformer_viewer.viewer.views.empty_state import EmptyState
from transformer_viewer.viewer.views.heatmap import HeatmapExport, HeatmapView
from transformer_viewer.viewer.views.parts import ExportButton, bar_over, shrinkable_title, view_bar
from transformer_viewer.viewer.views.patch_cell_requests import CellRequests
from transformer_viewer.viewer.views.patch_cells import (
    cell_readout,
    grid_title,
    layer_rows,
    metric_line,
    plot_title,
    shown_values,
)
from transformer_viewer.viewer.views.patch_controls import PatchControls

ASK_COMPARE = ("Compare with a corrupted prompt (View menu, or the button above) to see which components "
               "carry the difference between the two prompts")
ESTIMATE_NOTE = ("estimate: attribution patching, (clean \u2212 corrupted activation) \u00b7 gradient of the "
                 "metric, to first order")
CLICK_NOTE = "click a cell for its exact patch beside the estimate (shift-click: every cell between it and the last)"
KL_NOISE_NOTE = ("with the KL metric in the noising direction the gradient is zero at the clean run, so the "
                 "estimate is zero everywhere: use the exact grid")


class PatchingView(CellRequests, HeatmapExport, QtWidgets.QWidget):
    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.estimate = None  # PatchGrid: attribution patching's estimate of the shown setup
        self.exact = None  # PatchGrid: the exact patches (NaN where not computed)
        self.cells: dict[tuple[int, int], float] = {}  # exact raw values of clicked cells (long prompts)
        self.clicked: tuple[int, int] | None = None
        self.prompts = ("", "")  # the (clean, corrupted) prompts the grids are of
        self._asked = None  # what the grids were last asked for
        self._pending = None  # PatchRequest whose answer is wanted
        self._pending_cells = None  # PatchCellsRequest whose answer is wanted
        self.estimate_failure = ""  # why the estimate could not be computed, when it could not
        self.exact_max_tokens: int | None = None  # the worker's long-prompt threshold, once it has answered
        self.dropped = 0
        self.estimate_only = False  # the export command's --estimate: the exact grid is not asked for after it
        self.controls = PatchControls(state)
        self.compare_button = QtWidgets.QPushButton("Compare with a corrupted prompt")
        self.compare_button.clicked.connect(lambda: state.set_patching(comparing=True))
        self.show_estimate = QtWidgets.QCheckBox("show the estimate")
        self.show_estimate.setToolTip("Draw attribution patching's estimate instead of the exact patches")
        self.show_estimate.toggled.connect(lambda _on: self.draw())
        self.stop_button = QtWidgets.QToolButton(text="Stop")
        self.stop_button.setToolTip("Stop computing the patches (within one batch of patched runs)")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setEnabled(False)
        self.info = QtWidgets.QLabel("")
        self.info.setWordWrap(True)
        self.export_button = ExportButton(self, "patching")
        bar = view_bar(self.info, self.export_button, self.compare_button, self.stop_button, self.show_estimate)
        self.heatmap = HeatmapView()
        shrinkable_title(self.heatmap.plot)  # the figure's title band says it all; the panel's may be cut
        self.readout = QtWidgets.QLabel(" ")
        self.readout.setWordWrap(True)
        self.readout.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notes = QtWidgets.QLabel("")
        self.notes.setWordWrap(True)
        self.notes.setStyleSheet("color: #555")
        page = QtWidgets.QWidget()
        layout = QtWidgets.QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.controls)
        layout.addWidget(self.heatmap, 1)
        layout.addWidget(self.readout)
        layout.addWidget(self.notes)
        bar_over(self, bar, page)
        self.cover = EmptyState(self.heatmap)
        self.heatmap.cell_clicked.connect(self._on_cell_clicked)
        state.patching_changed.connect(self._on_setup)
        state.prompt_changed.connect(self._on_prompt)
        state.trace_changed.connect(lambda _t: self.request())
        state.mask_changed.connect(lambda _m: self.request())
        self._say(ASK_COMPARE)

    # -- what is asked --------------------------------------------------------------------
    def _on_setup(self) -> None:
        self.compare_button.setVisible(not self.state.patching.comparing)
        self.draw()  # the normalisation is drawn at once; everything else asks again
        self.request()

    def _on_prompt(self, text: str) -> None:
        p = self.state.patching
        if p.pairs and text != p.pairs[0][0]:  # a prompt typed over a pairs file's: patch that pair again
            self.state.set_patching(pairs=(), pairs_name="")

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        self.request()

    def wanted(self):
        """The PatchRequest the setup asks for now, or a line saying why there is none."""
        from transformer_viewer.viewer.worker.patching import PatchRequest, estimated

        st, p = self.state, self.state.patching
        if not p.active:
            return ASK_COMPARE if not p.comparing else "type the corrupted prompt to compare with"
        if st.trace is None or st.model_info is None:
            return "run a prompt to patch"
        try:
            metric = p.metric_value(st.model_info.vocab_size or None)
        except ModelError as e:
            return str(e)
        tokens = st.corrupted_tokens
        same_length = tokens is None or len(tokens.ids) == st.trace.n_tokens
        if p.what in BY_POSITION and not p.pairs and not same_length:
            return length_line(st.trace.n_tokens, len(tokens.ids))
        return PatchRequest(text=st.prompt, corrupted=p.corrupted, pairs=p.pairs, what=p.what, metric=metric,
                            direction=p.direction, intervention=st.intervention,
                            layer=p.layer if p.what == "heads-by-pos" else None,
                            receiver=p.receiver if p.what == "path" else None, input=p.input,
                            estimate=estimated(p.what) and same_length and not p.pairs)

    def long_prompt(self) -> bool:
        """Above the length where the exact grid would take minutes (the worker says where)."""
        return self.exact_max_tokens is not None and self.state.n_tokens > self.exact_max_tokens

    def request(self) -> None:
        """Ask for the grid the setup shows, once each: the estimate first where there is one,
        then (up to the long-prompt threshold) the exact grid."""
        import dataclasses

        if not self.isVisible():
            return
        want = self.wanted()
        if isinstance(want, str):
            if self._pending is not None or self._pending_cells is not None:
                self.stop()  # its answer would be dropped: the worker need not finish it
            self._asked = None
            self._forget()
            self._say(want)
            return
        key = dataclasses.replace(want, rid=0)
        if same_request(key, self._asked):
            return
        self._asked = key
        if self._pending_cells is not None:  # cells of the old grid: a new PatchRequest supersedes only its own kind
            self.worker.cancel("patching_cells")
        self._forget()
        self.prompts = (want.text, want.corrupted)
        self._submit(want)

    def _forget(self) -> None:
        self.estimate = self.exact = None
        self.estimate_failure = ""
        self.cells, self.clicked = {}, None
        self._pending = self._pending_cells = None
        self.stop_button.setEnabled(False)
        self.draw()

    def _submit(self, request) -> None:
        what = "estimating" if request.estimate else "patching"
        self._say(f"{what} {request.what} \u2026")
        self._pending = request
        self.stop_button.setEnabled(True)
        self.worker.submit(request, on_result=self._on_result, on_failure=self._on_failed)

    def _on_result(self, answer) -> None:
        import dataclasses

        if not same_request(answer.request, self._pending):
            self.dropped += 1  # asked for something else since
            return
        self._pending = None
        self.stop_button.setEnabled(self._pending_cells is not None)
        grid = self._named(answer.request, answer.value.grid)
        self.exact_max_tokens = answer.value.exact_max_tokens
        if grid.estimate and grid.what == "heads-by-pos":  # every layer's heads: the chosen layer's rows
            grid = layer_rows(grid, self.state.patching.layer, self.state.n_head)
        if grid.estimate:
            self.estimate = grid
            if not self.long_prompt() and not self.estimate_only:
                self._submit(dataclasses.replace(answer.request, estimate=False))
        else:
            self.exact = grid
        self.draw()

    def _named(self, request, grid):
        """`grid` with its metric described by the tokens' labels (every kind alike; a pairs
        file's grid keeps its own line, which may name each pair's tokens)."""
        import dataclasses

        from transformer_viewer.viewer.views.logits_panel import token_label

        if request.pairs or self.state.model_info is None:
            return grid
        tok = self.state.tokenizer()
        return dataclasses.replace(grid, metric=request.metric.describe(lambda t: token_label(t, tok)))

    def _on_failed(self, failure) -> None:
        import dataclasses

        if not (same_request(failure.request, self._pending) or same_request(failure.request, self._pending_cells)):
            return  # a request no longer wanted (stopped as the setup changed)
        if same_request(failure.request, self._pending):
            self._pending = None
            if failure.request.estimate and not failure.cancelled:  # no estimate here: the exact grid, then
                self.estimate_failure = failure.message
                self._submit(dataclasses.replace(failure.request, estimate=False))
                return
        if same_request(failure.request, self._pending_cells):
            self._pending_cells = None
        self._asked = None if self.estimate is None and self.exact is None else self._asked
        self.stop_button.setEnabled(self._pending is not None or self._pending_cells is not None)
        stopped = "stopped" if failure.cancelled else failure.message
        self._say(f"patching {stopped}; change the setup or show this tab again to compute it")

    def stop(self) -> None:
        """Stop the running patching job (within one batch of patched runs)."""
        for kind in ("patching", "patching_cells"):
            self.worker.cancel(kind)

    # -- drawing --------------------------------------------------------------------------
    def shown_grid(self):
        if self.estimate is not None and (self.show_estimate.isChecked() or self.exact is None):
            return self.estimate
        return self.exact

    def _say(self, text: str) -> None:
        self.info.setText(text)
        self.cover.show_message(text if self.shown_grid() is None else None)

    def title(self) -> str:
        grid, p = self.shown_grid(), self.state.patching
        if grid is None:
            return ""
        return grid_title(grid, *self.prompts, p.normalised, p.pairs_name)

    def figure_notes(self) -> list[str]:
        """The lines under the grid (the metric of both runs, the mask, an estimate's caveats), for
        figures: the view's own labels are left out of them."""
        text = self.notes.text()
        return [line for line in text.split("\n") if line != CLICK_NOTE] if text else []  # a figure has no cells to click

    def draw(self) -> None:
        grid, p = self.shown_grid(), self.state.patching
        self.show_estimate.setVisible(self.estimate is not None and self.exact is not None)
        if grid is None:
            self.readout.setText(" ")
            self.notes.setText("")
            return
        clamps = len(self.state.clamps)
        self.heatmap.set_data(shown_values(grid, p.normalised), grid.rows, grid.cols, levels=None, diverging=True,
                              title=plot_title(grid, p.normalised, clamps), row_name=grid.row_axis,
                              col_name=grid.col_axis)
        notes = [metric_line(grid), p.mask_line(int(self.state.mask.sum()), clamps)]
        if grid.note:
            notes.append(grid.note)
        if self.estimate_failure:
            notes.append(f"no estimate: {self.estimate_failure}")
        if grid.estimate:  # what the estimate is, unless its own note says it
            if "estimate" not in grid.note:
                notes.append(ESTIMATE_NOTE)
            if grid.metric.startswith("KL") and grid.direction == "noise" and "zero everywhere" not in grid.note:
                notes.append(KL_NOISE_NOTE)
            if self.exact is None:
                notes.append(CLICK_NOTE)
        self.notes.setText("\n".join(notes))
        busy = self._pending is not None
        kind = "estimate (exact patches computing\u2026)" if busy and grid.estimate else (
            "estimate" if grid.estimate else "exact patches")
        self._say(f"{grid.what}: {kind}")
        self._show_readout()

    def _show_readout(self) -> None:
        grid = self.shown_grid()
        if grid is None or self.clicked is None:
            self.readout.setText(" ")
            return
        r, c = self.clicked
        if not (0 <= r < grid.raw.shape[0] and 0 <= c < grid.raw.shape[1]):
            return
        self.readout.setText(cell_readout(grid, r, c, self.state.patching.normalised, estimate=self.estimate,
                                          exact=self.exact_grid()))

    def set_result(self, grid, clean: str, corrupted: str, estimate=None) -> None:
        """Draw `grid` (exact, or an estimate) of the prompts `clean` and `corrupted`: the command
        line's figures, without a worker."""
        self.prompts = (clean, corrupted)
        if grid.estimate:
            self.estimate, self.exact = grid, None
        else:
            self.exact, self.estimate = grid, estimate
        self.draw()

    def matrix(self):
        """The data an export writes: the shown grid's raw metric per cell (NaN: not computed),
        whichever scale the heatmap draws, as `transformer-viewer patch --out FILE.npy` writes it."""
        import numpy as np

        grid = self.shown_grid()
        return np.zeros((0, 0), dtype=np.float32) if grid is None else grid.raw

    def row_labels(self):
        grid = self.shown_grid()
        return None if grid is None else list(grid.rows)

    def col_labels(self):
        grid = self.shown_grid()
        return None if grid is None else list(grid.cols)

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(900, 700)
