"""MLP neurons of the selected layer: post-activation heatmap (neurons x tokens) and a table of
neurons. Clicking a neuron colours the token chips by it (state.set_neuron).

A trace keeps only per-neuron summaries (max, its token, mean) of every layer; the layer's full
(T, n_mlp) activations come from the worker when the view (or the token strip) needs them, and
until they do the table lists the neurons by their summaries. Neurons are ordered by their
largest activation over the prompt, by their activation on the selected token, or by index;
the heatmap shows the first `rows` of that order (at most MAX_ROWS: a layer may have 16k
neurons), its token axis pooled by the block maximum when the prompt is longer than the
screen is wide. With "Diff vs clean" on it shows the activations under the intervention (masked
heads, feature clamps) minus the clean ones, ordered by the largest absolute change.
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.decimate import column_blocks, column_labels, pool
from transformer_viewer.viewer.views.heatmap import HeatmapView
from transformer_viewer.viewer.views.neuron_ranks import (
    SORTS,
    TOP_K,
    largest_change,
    neuron_order,
    neuron_rows,
    top_neurons,
)
from transformer_viewer.viewer.views.parts import (
    AdaptiveSplitter,
    DiffToggle,
    ExportButton,
    bar_over,
    compact_axes,
    compact_table,
    run_name,
)
from transformer_viewer.viewer.views.shown_refresh import out_of_sight

MAX_ROWS = 1024  # heatmap rows; the order still ranks every neuron


class MLPView(QtWidgets.QWidget):
    def __init__(self, state, worker=None, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self._order = np.zeros(0, dtype=np.int64)
        self._full = np.zeros((0, 0), dtype=np.float32)  # (rows, T) what export writes
        self._tokens = np.zeros((0, 0), dtype=np.int64)  # (rows, columns) token of each drawn cell
        self._asked = None  # (run ids, layer) of the request in flight
        self._drawn = None  # (trace, clean trace, (layer, diff, order bytes)) the heatmap shows
        self._peak_cache = None  # ((trace, clean trace, layer), largest |change|)
        self.heatmap = HeatmapView()
        self.sort_combo = QtWidgets.QComboBox()
        for key, text in SORTS.items():
            self.sort_combo.addItem(text, key)
        self.sort_combo.setToolTip("Order of the neuron rows")
        self.sort_combo.currentIndexChanged.connect(self.refresh)
        self.rows_spin = QtWidgets.QSpinBox()
        self.rows_spin.setRange(1, MAX_ROWS)
        self.rows_spin.setValue(64)
        self.rows_spin.setPrefix("rows ")
        self.rows_spin.setToolTip(f"How many neurons (in the chosen order) the heatmap shows, at most {MAX_ROWS}")
        self.rows_spin.valueChanged.connect(self.refresh)
        self.diff = DiffToggle(state)
        self.diff.toggled.connect(self.refresh)
        self.export_button = ExportButton(self, "mlp")
        self.top_table = QtWidgets.QTableWidget(0, 4)
        self.top_table.setHorizontalHeaderLabels(["neuron", "activation", "max", "at"])
        self.top_table.setToolTip("activation: on the selected token (or the change there under a mask or clamp); "
                                  "max: the neuron's largest activation over the prompt, at that position and token")
        compact_table(self.top_table)
        self.top_table.setMinimumWidth(190)
        self.top_table.cellClicked.connect(self._on_table_click)
        self.top_title = QtWidgets.QLabel("")
        self.top_title.setWordWrap(True)
        self.clear_button = QtWidgets.QPushButton("Clear neuron")
        self.clear_button.setToolTip("Stop colouring the token chips by a neuron")
        self.clear_button.clicked.connect(lambda: state.set_neuron(None))

        bar = QtWidgets.QHBoxLayout()
        bar.setContentsMargins(4, 2, 4, 0)
        bar.addWidget(QtWidgets.QLabel("Sort by"))
        bar.addWidget(self.sort_combo)
        bar.addWidget(self.rows_spin)
        bar.addWidget(self.diff)
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        side = QtWidgets.QVBoxLayout()
        side.addWidget(self.top_title)
        side.addWidget(self.top_table, 1)
        side.addWidget(self.clear_button)
        side_box = QtWidgets.QWidget()
        side_box.setLayout(side)
        body = AdaptiveSplitter(ratio=1.1)
        body.addWidget(self.heatmap)
        body.addWidget(side_box)
        body.setStretchFactor(0, 4)
        body.setStretchFactor(1, 1)
        bar_over(self, bar, body)

        self.heatmap.cell_clicked.connect(self._on_cell_click)
        state.trace_changed.connect(self.refresh)
        state.selection_changed.connect(self.refresh)
        state.neuron_changed.connect(lambda _n: self.refresh())
        state.activations_changed.connect(lambda _layer: self.refresh())
        self.refresh()

    # -- export protocol ------------------------------------------------------------------
    def set_sort(self, sort: str) -> None:
        self.sort_combo.setCurrentIndex(list(SORTS).index(sort))

    def order(self) -> np.ndarray:
        """Neuron index of each displayed row."""
        return self._order

    def export_target(self):
        return self.heatmap.export_target()

    def matrix(self) -> np.ndarray:
        """The shown neurons over every token at full resolution (the picture may pool tokens)."""
        return self._full

    def row_labels(self):
        return self.heatmap.row_labels()

    def col_labels(self):
        trace = self.state.trace
        return trace.labels if trace is not None and self._full.size else ()

    # -- the layer's activations ----------------------------------------------------------
    def _activations(self, layer: int, diff: bool):
        """(acts, clean) of the layer, asking the worker for what is missing; None while waiting."""
        st = self.state
        acts = st.layer_activations(st.trace, layer)
        clean = st.layer_activations(st.clean_trace, layer) if diff else None
        if acts is not None and (clean is not None or not diff):
            return acts, clean
        missing = [(st.trace, acts)] + ([(st.clean_trace, clean)] if diff else [])
        runs = tuple(dict.fromkeys(t.run_id for t, have in missing if have is None))
        wanted = self.worker is not None and (self.isVisible() or st.neuron is not None)
        if wanted and self._asked != (runs, layer):
            self._request(runs, layer)
            acts = st.layer_activations(st.trace, layer)  # an inline worker has answered already
            clean = st.layer_activations(st.clean_trace, layer) if diff else None
            if acts is not None and (clean is not None or not diff):
                return acts, clean
        return None

    def _request(self, runs: tuple[int, ...], layer: int) -> None:
        from transformer_viewer.viewer.worker.mlp import MlpActivationsRequest

        self._asked = (runs, layer)

        def arrived(answer) -> None:
            self._asked = None
            self.state.set_layer_activations(answer.value.layer, answer.value.acts)

        def failed(failure) -> None:
            self._asked = None
            if not failure.cancelled:
                self.top_title.setText(f"MLP activations: {failure.message}")
        self.worker.submit(MlpActivationsRequest(run_ids=runs, layer=layer), on_result=arrived, on_failure=failed)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        self.refresh()  # hidden, the view drew nothing and asked only for a selected neuron's layer

    # -- drawing --------------------------------------------------------------------------
    def refresh(self, *_args) -> None:
        st = self.state
        trace = st.trace
        if trace is None or not 0 <= st.layer < trace.mlp_max.shape[0]:
            return
        layer, q = st.layer, st.query_index
        diff = self.diff.active
        got = self._activations(layer, diff)  # asked for while hidden too when a neuron colours the tokens
        if out_of_sight(self):
            return  # behind another tab: drawn when shown (showEvent)
        if got is None:
            self._draw_summaries(trace, layer)
            return
        acts, clean = got
        sort = self.sort_combo.currentData()
        peak = None
        if sort == "max":
            peak = self._largest_change(acts, clean, (trace, st.clean_trace, layer)) if diff else trace.mlp_max[layer]
        order = neuron_order(acts, sort, q, clean, peak)[: self.rows_spin.value()]
        key = (layer, diff, order.tobytes())
        drawn = self._drawn
        if drawn is None or drawn[0] is not trace or drawn[1] is not st.clean_trace or drawn[2] != key:
            self._draw_heatmap(trace, layer, acts, clean, order)  # a new query alone redraws only what marks it
            self._drawn = (trace, st.clean_trace, key)
        rows = np.flatnonzero(order == st.neuron) if st.neuron is not None else []
        self.heatmap.highlight_row(int(rows[0]) if len(rows) else None)
        top = top_neurons(acts, q, TOP_K, clean)
        self.top_title.setText(f"top neurons for {trace.labels[q]!r} ({q}), layer {layer}"
                               + (f" — change when {run_name(trace.intervention)}" if diff else ""))
        self._fill_table(trace, layer, top, signed=diff)

    def _draw_heatmap(self, trace, layer: int, acts, clean, order: np.ndarray) -> None:
        diff = clean is not None
        self._order = order
        self._full = neuron_rows(acts, order, clean)  # (rows, T)
        cols = column_blocks(trace.n_tokens)
        shown, self._tokens = pool(self._full, cols, signed=diff)
        name = run_name(trace.intervention)
        what = f"{name} − clean " if diff else ""
        model = f" ({name} model)" if not trace.intervention.is_empty and not diff else ""
        pooled = f", {'largest change' if diff else 'max'} of each {cols.size} tokens" if cols.pooled else ""
        self.heatmap.set_data(shown, [f"n{n}" for n in order], column_labels(trace.labels, cols), levels=None,
                              diverging=diff, colormap=None if diff else "inferno",
                              title=f"{what}MLP post-activation, layer {layer}{model}{pooled}",
                              row_name="neuron", col_name="token")
        compact_axes(self.heatmap)
        self.heatmap.plot.getAxis("bottom").set_positions(None, numbered=not cols.pooled)  # ranges say where

    def _largest_change(self, acts, clean, key: tuple) -> np.ndarray:
        """`largest_change` once per (trace, clean trace, layer), not per redraw."""
        cached = self._peak_cache
        if cached is None or any(a is not b for a, b in zip(cached[0][:2], key[:2], strict=True)) \
                or cached[0][2] != key[2]:
            self._peak_cache = cached = (key, largest_change(acts, clean))
        return cached[1]

    def _draw_summaries(self, trace, layer: int) -> None:
        """Before the layer's activations arrive: the neurons by their largest activation."""
        peak = trace.mlp_max[layer]
        order = np.argsort(-peak, kind="stable")[:TOP_K]
        self._order, self._full = np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        self._drawn = None
        self.heatmap.set_data(np.zeros((0, 0)), (), (), title=f"MLP post-activation, layer {layer}: fetching…")
        self.top_title.setText(f"neurons with the largest activation, layer {layer} "
                               "(fetching the layer's activations…)")
        self._fill_table(trace, layer, [(int(n), float(peak[n])) for n in order])

    def _fill_table(self, trace, layer: int, rows: list[tuple[int, float]], signed: bool = False) -> None:
        st = self.state
        self.top_table.setRowCount(len(rows))
        for i, (n, v) in enumerate(rows):
            at = int(trace.mlp_argmax[layer, n])
            cells = (f"{n}", f"{v:+.4f}" if signed else f"{v:.4f}", f"{float(trace.mlp_max[layer, n]):.3f}",
                     f"{at} {trace.labels[at]!r}")
            for j, text in enumerate(cells):
                item = QtWidgets.QTableWidgetItem(text)
                item.setData(QtCore.Qt.ItemDataRole.UserRole, n)
                self.top_table.setItem(i, j, item)
            if n == st.neuron:
                self.top_table.selectRow(i)
        self.top_table.resizeColumnsToContents()

    def top_list(self) -> list[tuple[int, float]]:
        """(neuron, value) rows of the table as shown."""
        out = []
        for i in range(self.top_table.rowCount()):
            n = self.top_table.item(i, 0).data(QtCore.Qt.ItemDataRole.UserRole)
            out.append((int(n), float(self.top_table.item(i, 1).text())))
        return out

    def _on_cell_click(self, row: int, col: int) -> None:
        if 0 <= row < len(self._order):
            self.state.set_neuron(int(self._order[row]))
            self.state.set_selection(query=int(self._tokens[row, col]))

    def _on_table_click(self, row: int, _col: int) -> None:
        item = self.top_table.item(row, 0)
        if item is not None:
            self.state.set_neuron(int(item.data(QtCore.Qt.ItemDataRole.UserRole)))

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(900, 520)
