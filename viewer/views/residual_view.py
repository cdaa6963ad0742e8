"""Residual stream: L2 norms through depth for every token, and what each head of a layer wrote.

Top: a heatmap of the norms (rows embed, L.pre, L.mid, ..., final; columns tokens). Middle: the
norms through depth for the selected token (the clean model dashed when a head is masked or a
feature clamped). Bottom: the L2 norm of each head's write into the residual stream, heads x
tokens, for the selected layer. With "Diff vs clean" on, every panel shows the run under the
intervention (masked heads, feature clamps) minus the clean run. A prompt longer than the
screen is wide is drawn with its token axis max-pooled (the largest norm, or change, of each
block of tokens; views/decimate.py); a click selects the token the cell's value came from.
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.decimate import column_blocks, column_labels, pool
from transformer_viewer.viewer.views.heatmap import HeatmapView
from transformer_viewer.viewer.views.parts import (
    CLEAN_PEN,
    MAIN_PEN,
    AdaptiveSplitter,
    DiffToggle,
    ExportButton,
    bar_over,
    compact_axes,
    depth_plot,
    head_labels,
    run_name,
    set_depth_ticks,
    shrinkable_title,
    view_bar,
)
from transformer_viewer.viewer.views.shown_refresh import RefreshWhenShown, when_shown

NORM_COLORMAP = "viridis"


def residual_matrices(trace, clean, layer: int, query: int, diff: bool) -> dict:
    """The three panels' data. `diff` subtracts the clean trace (it must cover the same tokens)."""
    norms = trace.resid_norms.astype(np.float32)  # (2L + 2, T)
    heads = trace.head_norms[layer].astype(np.float32)  # (nh, T)
    clean_line = None
    if diff:
        norms = norms - clean.resid_norms.astype(np.float32)
        heads = heads - clean.head_norms[layer].astype(np.float32)
    elif clean is not None and clean is not trace and clean.n_tokens == trace.n_tokens:
        clean_line = clean.resid_norms[:, query].astype(np.float32)
    return {"norms": norms, "heads": heads, "line": norms[:, query], "clean_line": clean_line}


def _shows(drawn, trace, clean, settings) -> bool:
    """Whether a heatmap drawn from `drawn` = (trace, clean, settings) shows these (traces by identity)."""
    return drawn is not None and drawn[0] is trace and drawn[1] is clean and drawn[2] == settings


def _compact(heatmap, cols) -> None:
    """Once per new picture (a relayout repaints every plot): axis names hidden, a pooled
    column labelled by its range of positions."""
    compact_axes(heatmap)
    heatmap.plot.getAxis("bottom").set_positions(None, numbered=not cols.pooled)


class ResidualView(RefreshWhenShown, QtWidgets.QWidget):
    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state = state
        self.norms = HeatmapView()
        self.heads = HeatmapView()
        self.line = depth_plot(left="L2 norm", bottom="depth")
        self.diff = DiffToggle(state)
        self.diff.toggled.connect(self.refresh)
        self.log_box = QtWidgets.QCheckBox("Log scale")
        self.log_box.setToolTip("Colour the norms on a log scale (not in diff mode)")
        self.log_box.toggled.connect(self.refresh)
        self.export_button = ExportButton(self, "residual_norms")
        self.info = QtWidgets.QLabel("")
        self.info.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)

        bar = view_bar(self.info, self.export_button, self.diff, self.log_box)
        # Wide: the three panels side by side; narrow (a tab in the middle): the norms on top.
        lower = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        lower.setChildrenCollapsible(False)
        lower.addWidget(self.line)
        lower.addWidget(self.heads)
        lower.setSizes([300, 480])
        self.plots = AdaptiveSplitter(ratio=2.2)
        self.plots.addWidget(self.norms)
        self.plots.addWidget(lower)
        self.plots.setSizes([520, 780])
        bar_over(self, bar, self.plots)

        self._norm_tokens = self._head_tokens = np.zeros((0, 0), dtype=np.int64)  # token of each drawn cell
        self._norms_full = np.zeros((0, 0), dtype=np.float32)
        self._drawn_norms = self._drawn_heads = None  # what each heatmap shows: (trace, clean, settings)
        self.norms.cell_clicked.connect(lambda row, col: state.set_selection(query=int(self._norm_tokens[row, col])))
        self.heads.cell_clicked.connect(
            lambda row, col: state.set_selection(head=row, query=int(self._head_tokens[row, col])))
        state.trace_changed.connect(self.refresh)
        state.selection_changed.connect(self.refresh)
        self.refresh()

    # -- export protocol ------------------------------------------------------------------
    def export_target(self):
        return self.plots

    def matrix(self) -> np.ndarray:
        """The norms at full resolution (the picture may pool tokens)."""
        return self._norms_full

    def row_labels(self):
        return self.norms.row_labels()

    def col_labels(self):
        trace = self.state.trace
        return trace.labels if trace is not None and self._norms_full.size else ()

    # -- drawing --------------------------------------------------------------------------
    @when_shown
    def refresh(self, *_args) -> None:
        st = self.state
        trace = st.trace
        if trace is None:
            self.info.setText("run a prompt to see the residual stream")
            return
        layer, head, q = st.layer, st.head, st.query_index
        diff = self.diff.active
        data = residual_matrices(trace, st.clean_trace, layer, q, diff)
        tokens = trace.labels
        name, changed = run_name(trace.intervention), not trace.intervention.is_empty
        what = f"{name} − clean " if diff else ""
        model = f" ({name} model)" if changed and not diff else ""
        cols = column_blocks(trace.n_tokens)
        columns = column_labels(tokens, cols)
        pooled = f", {'largest change' if diff else 'max'} of each {cols.size} tokens" if cols.pooled else ""
        log = self.log_box.isChecked() and not diff
        self._norms_full = data["norms"]
        # A new query alone changes only the line plot: the heatmaps are redrawn when what they show changes.
        if not _shows(self._drawn_norms, trace, st.clean_trace, (diff, log)):
            self._drawn_norms = (trace, st.clean_trace, (diff, log))
            norms, self._norm_tokens = pool(data["norms"], cols, signed=diff)
            self.norms.set_data(norms, trace.resid_labels, columns, levels=None, diverging=diff,
                                colormap=None if diff else NORM_COLORMAP, log_scale=log,
                                title=f"{what}residual-stream L2 norm{model}{pooled}", row_name="stream",
                                col_name="token")
            _compact(self.norms, cols)
        if not _shows(self._drawn_heads, trace, st.clean_trace, (diff, layer)):
            self._drawn_heads = (trace, st.clean_trace, (diff, layer))
            heads, self._head_tokens = pool(data["heads"], cols, signed=diff)
            self.heads.set_data(heads, head_labels(heads.shape[0]), columns, levels=None, diverging=diff,
                                colormap=None if diff else NORM_COLORMAP,
                                title=f"{what}per-head output norm, layer {layer}{model}{pooled}", row_name="head",
                                col_name="token")
            _compact(self.heads, cols)
        self.heads.highlight_row(head)
        plot = self.line.getPlotItem()
        plot.clear()
        if plot.legend is None:
            plot.addLegend(offset=(8, 8), labelTextSize="8pt")
        x = np.arange(len(trace.resid_labels))
        if data["clean_line"] is not None:
            plot.plot(x, data["clean_line"], pen=CLEAN_PEN, name="clean")
        plot.plot(x, data["line"], pen=MAIN_PEN, symbol="o", symbolSize=5, symbolBrush=(30, 100, 200),
                  name=f"{name} − clean" if diff else (name if changed else None))
        if diff:
            plot.addLine(y=0, pen=CLEAN_PEN)
        set_depth_ticks(self.line, trace.resid_labels)
        plot.setTitle(f"{what}norm through depth, {tokens[q]!r} ({q})", size="9pt")
        shrinkable_title(plot)
        top = int(np.argmax(data["norms"][:, q])) if not diff else int(np.argmax(np.abs(data["norms"][:, q])))
        self.info.setText(f"token {tokens[q]!r} ({q}): final norm {trace.resid_norms[-1, q]:.2f}; "
                          f"largest {'change' if diff else 'norm'} at {trace.resid_labels[top]}")

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(900, 560)
