"""Logit lens: the token each layer's residual stream would predict, layers x positions.

The heatmap colours each cell by the probability of its top token (fixed levels 0..1) and, when
the prompt is short enough, writes the token in the cell; hovering names it at any length. On
the right, for the selected position: each layer's top token and the rank of the model's final
top token through depth (log scale). With "Diff vs clean" on, the cells show
p_intervened(clean top token) - p_clean(clean top token), the intervened run being the one under
the masked heads and feature clamps. The lens is computed on the worker (a LensRequest per trace); a prompt
longer than its window (WINDOW positions for GPT-2-small, fewer for a larger model, so that
the unembedding costs about the same: `window_size`) is shown over the positions around the selected one
(moving the selection out of it asks for the window there), since every position of a long
prompt through a large vocabulary would take minutes. Token labels are made only for the cells
that are written or hovered: a lens has (layers + 1) x positions cells. A lens of an earlier
prompt stays drawn until the new one arrives, under a strip that says so.
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.empty_state import EmptyState, StaleMark, quoted_prompt
from transformer_viewer.viewer.views.heatmap import HeatmapExport, format_value
from transformer_viewer.viewer.views.logits_panel import token_label
from transformer_viewer.viewer.views.parts import (
    CLEAN_PEN,
    MAIN_PEN,
    AdaptiveSplitter,
    DiffToggle,
    ExportButton,
    TextHeatmap,
    bar_over,
    compact_axes,
    compact_table,
    depth_plot,
    run_name,
    set_depth_ticks,
    shrinkable_title,
    view_bar,
)

WINDOW = 256  # positions a long prompt's lens covers at most
MIN_WINDOW = 32  # and at least, however large the model
# What the reductions over one logit cost (log-sum-exp, top token, the final token's rank and
# probability), in multiply-adds of the unembedding. They weigh most at small widths, and what
# they cost against a multiply-add differs between CPUs by about 2x (BENCHMARKS.md, "The lens
# window's cost model"): the larger of the measured costs keeps a window in budget on each.
LOGIT_WORK = 500
# What one lens window may cost in those units: GPT-2-small's 13 rows x 256 positions x 50,257
# tokens, about 2 s on 2 CPU cores (a new lens asks for this once, a head toggle for the rows
# after the masked layer only).
LENS_BUDGET = 13 * WINDOW * 50257 * (768 + LOGIT_WORK)


def window_size(n_rows: int, vocab_size: int, width: int) -> int:
    """Positions per lens window: as many as LENS_BUDGET pays for (the lens's cost is rows x
    positions x vocabulary x (width + LOGIT_WORK)), between MIN_WINDOW and WINDOW."""
    per_position = max(int(n_rows), 1) * max(int(vocab_size), 1) * (max(int(width), 1) + LOGIT_WORK)
    return max(MIN_WINDOW, min(WINDOW, LENS_BUDGET // per_position))


def lens_window(n_tokens: int, query: int, size: int = WINDOW) -> tuple[int, int]:
    """The positions a lens of a prompt of n_tokens shows around `query`: all of them when they
    fit, else `size` of them with the query three quarters of the way in (what comes before a
    token is what explains it)."""
    if n_tokens <= size:
        return 0, n_tokens
    start = max(0, min(query - (3 * size) // 4, n_tokens - size))
    return start, start + size


class TokenGrid:
    """The labels of an (R, C) grid of token ids, made when read (rows and cells index like a
    list of lists)."""

    def __init__(self, ids: np.ndarray, tokenizer):
        self.ids, self.tokenizer = ids, tokenizer

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __getitem__(self, row: int) -> _TokenRow:
        return _TokenRow(self.ids[row], self.tokenizer)


class _TokenRow:
    def __init__(self, ids: np.ndarray, tokenizer):
        self.ids, self.tokenizer = ids, tokenizer

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __getitem__(self, col: int) -> str:
        return token_label(int(self.ids[col]), self.tokenizer)


class LensView(HeatmapExport, QtWidgets.QWidget):
    """`set_result(LensResult)` draws; with a worker it asks for one on every new trace."""

    def __init__(self, state, worker=None, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.result = None
        self.heatmap = TextHeatmap()
        self.rank_plot = depth_plot(left="rank (log)", bottom="depth")
        self.rank_plot.getPlotItem().setLogMode(y=True)
        self.table = QtWidgets.QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["layer", "top token", "p", "rank"])
        compact_table(self.table)
        self.diff = DiffToggle(state)
        self.diff.toggled.connect(self.refresh)
        self.export_button = ExportButton(self, "logit_lens")
        self.info = QtWidgets.QLabel("")
        self.info.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)

        bar = view_bar(self.info, self.export_button, self.diff)
        side = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        side.setChildrenCollapsible(False)
        side.addWidget(self.rank_plot)
        side.addWidget(self.table)
        body = AdaptiveSplitter(ratio=1.3, inner=side)
        body.addWidget(self.heatmap)
        body.addWidget(side)
        body.setSizes([640, 320])
        page = QtWidgets.QWidget()  # the cover's parent: a splitter would take it as a third pane
        layout = QtWidgets.QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(body)
        bar_over(self, bar, page)
        self.cover = EmptyState(page)  # no placeholder axes before the first lens is drawn
        self.stale = StaleMark(self.heatmap)  # over a lens of an earlier prompt

        self.heatmap.cell_clicked.connect(lambda _r, col: state.set_selection(query=self._start + col))
        self._start = 0  # the position of the drawn lens's first column
        self._asked: tuple | None = None  # (run id, window) last asked for
        self._drawn: tuple | None = None  # (result, diff) the heatmap shows
        state.trace_changed.connect(self._on_trace)
        state.selection_changed.connect(self._on_selection)
        state.mask_changed.connect(lambda _m: self.refresh())  # "computing…" until the new lens comes
        state.prompt_changed.connect(lambda _t: self._mark_stale())
        self._pending = False
        self._on_trace(state.trace)  # built after a run (an export): ask once shown

    # -- worker ---------------------------------------------------------------------------
    def _on_trace(self, trace) -> None:
        if trace is None:  # another model or no prompt: what is drawn no longer applies
            self._drawn = None
            self.refresh()
            return
        if self.worker is not None:
            if self._asked is not None and self._asked[0] == trace.run_id and not self._pending:
                self.refresh()  # the same run again (its log-probabilities came): the lens asked for stands
                return
            if self.isVisible():
                self.request()
            else:
                self._pending = True  # asked for when the dock is shown: the lens costs (L+1) x T x V
        self.refresh()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        if self._pending:
            self.request()

    def _on_selection(self) -> None:
        st = self.state
        if self.worker is not None and st.trace is not None and self._asked is not None:
            a, b = self._asked[1]
            if self._pending or not a <= st.query_index < b:  # asked again after a cancel, or left the window
                if self.isVisible():
                    self.request()
                else:
                    self._pending = True
        self.refresh()

    def request(self) -> None:
        from transformer_viewer.viewer.worker.lens import LensRequest

        st = self.state
        self._pending = False
        if st.trace is None or not st.prompt:
            return
        info = st.model_info
        size = WINDOW if info is None else window_size(info.n_layer + 1, info.vocab_size or 50257, info.n_embd)
        window = lens_window(st.trace.n_tokens, st.query_index, size)
        self._asked = (st.trace.run_id, window)
        self.worker.submit(LensRequest(text=st.prompt, intervention=st.intervention,
                                       window=None if window == (0, st.trace.n_tokens) else window),
                           on_result=lambda answer: self.set_result(answer.value), on_failure=self._on_failed,
                           on_progress=self._on_progress)

    def _on_failed(self, failure) -> None:
        """Cancelled (or failed): say so, and ask again once the view is shown or a token selected."""
        self._pending = True  # nothing on its way now
        if self._current() is None:
            stopped = "stopped" if failure.cancelled else failure.message
            self._say(f"logit lens {stopped}; select a token or show this tab again to compute it")

    def _on_progress(self, p) -> None:
        if self._current() is None and p.total:
            self._say(f"computing the logit lens… {int(p.done)} of {int(p.total)} rows")

    def set_result(self, result) -> None:
        self.result = result
        self.refresh()

    # -- drawing --------------------------------------------------------------------------
    def _current(self):
        """The result if it fits the displayed trace and shows the selected position (a newer
        prompt, intervention or window may be on its way)."""
        r, trace = self.result, self.state.trace
        if r is None or trace is None or (r.n_tokens or r.lens.n_tokens) != trace.n_tokens:
            return None
        if r.text and r.text != self.state.prompt:  # another prompt of the same length
            return None
        if r.intervention != self.state.intervention:
            return None
        if not r.start <= self.state.query_index < r.start + r.lens.n_tokens:
            return None
        return r

    def is_stale(self) -> bool:
        """Whether the lens drawn is of another prompt than the current one."""
        drawn = self._drawn[0] if self._drawn is not None else None
        return drawn is not None and bool(drawn.text) and drawn.text != self.state.prompt

    def _mark_stale(self) -> None:
        prompt = self.state.prompt or ""
        if not self.is_stale() or not prompt.strip():
            self.stale.show_message(None)
            return
        self.stale.show_message(f"logit lens of the previous prompt {quoted_prompt(self._drawn[0].text)}; "
                                "computing this one\u2026")

    def refresh(self, *_args) -> None:
        st, r = self.state, self._current()
        trace = st.trace
        self._mark_stale()
        if r is None or trace is None:
            self._say("computing the logit lens…" if trace is not None else "run a prompt to see the logit lens")
            return
        self.cover.show_message(None)
        lens = r.lens
        a = r.start
        self._start, q = a, st.query_index - a  # q: the selected position's column
        diff = self.diff.active
        tok = st.tokenizer()  # the loaded model's
        tokens = TokenGrid(lens.top_ids, tok)
        if self._drawn is None or self._drawn[0] is not r or self._drawn[1] != diff:
            # a new selection inside the window redraws only the side panels
            self._drawn = (r, diff)
            self._draw_heatmap(r, trace, diff, tok)
            self._mark_stale()
        self._draw_ranks(r, q)
        self._fill_table(r, q, tokens)
        final = token_label(int(lens.final_ids[q]), tok)
        first = int(np.argmax(lens.final_ranks[:, q] == 0))
        self.info.setText(f"position {a + q} ({trace.labels[a + q]!r}): final top token {final!r}, "
                          f"top from {lens.row_labels[first]} on")

    def _say(self, text: str) -> None:
        """`text` in the bar, and over the plots until a lens is drawn (after that a newer one
        is on its way and the drawn one stays)."""
        self.info.setText(text)
        self.cover.show_message(text if self._drawn is None else None)

    def _draw_heatmap(self, r, trace, diff: bool, tok) -> None:
        lens = r.lens
        a, b = r.start, r.start + lens.n_tokens
        tokens = TokenGrid(lens.top_ids, tok)
        labels = trace.labels[a:b]
        window = f", positions {a}–{b - 1} of {trace.n_tokens}" if b - a < trace.n_tokens else ""
        if diff:
            self.heatmap.hover_prefix = "clean top token"
            self.heatmap.set_data(r.diff, lens.row_labels, labels, levels=None, diverging=True,
                                  title=f"{run_name(r.intervention)} − clean probability of the clean model's top token{window}",
                                  row_name="layer", col_name="position")
            lim = max(float(np.abs(r.diff).max()), 1e-12)
            self.heatmap.set_cell_text(TokenGrid(r.clean.top_ids, tok), np.abs(r.diff) < 0.6 * lim)
        else:
            self.heatmap.hover_prefix = "top token"
            self.heatmap.set_data(lens.top_probs, lens.row_labels, labels, levels=(0.0, 1.0),
                                  colormap="viridis", title="logit lens: top token and its probability"
                                  + (f" ({run_name(r.intervention)} model)" if not r.intervention.is_empty else "") + window,
                                  row_name="layer", col_name="position")
            self.heatmap.set_cell_text(tokens, lens.top_probs > 0.55)
        compact_axes(self.heatmap)
        self.heatmap.plot.getAxis("bottom").set_positions(range(a, b) if window else None)

    def position_of_column(self, col: int) -> int:
        """The prompt position a heatmap column shows."""
        return self._start + col

    def _draw_ranks(self, r, q: int) -> None:
        plot = self.rank_plot.getPlotItem()
        plot.clear()
        if plot.legend is None:
            plot.addLegend(offset=(-8, 8), labelTextSize="8pt")
        x = np.arange(r.lens.n_rows)
        # rank + 1 so that rank 0 (the top) sits at 10^0 on the log axis
        if r.clean is not r.lens:
            plot.plot(x, r.clean.final_ranks[:, q] + 1.0, pen=CLEAN_PEN, name="clean")
        plot.plot(x, r.lens.final_ranks[:, q] + 1.0, pen=MAIN_PEN, symbol="o", symbolSize=5,
                  symbolBrush=(30, 100, 200), name=run_name(r.intervention) if r.clean is not r.lens else None)
        set_depth_ticks(self.rank_plot, r.lens.row_labels)
        final = token_label(int(r.lens.final_ids[q]), self.state.tokenizer())
        plot.setTitle(f"rank + 1 of the final top token {final!r}", size="9pt")
        shrinkable_title(plot)

    def _fill_table(self, r, q: int, tokens) -> None:
        lens = r.lens
        self.table.setRowCount(lens.n_rows)
        for row in range(lens.n_rows):
            cells = (lens.row_labels[row], tokens[row][q], format_value(float(lens.top_probs[row, q])),
                     str(int(lens.final_ranks[row, q])))
            for j, text in enumerate(cells):
                self.table.setItem(row, j, QtWidgets.QTableWidgetItem(text))
        self.table.resizeColumnsToContents()

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(960, 480)
