"""MLP neurons of the selected layer: post-activation heatmap (neurons x tokens) and the top-k
neurons of the selected token. Clicking a neuron colours the token chips by it (state.set_neuron).

Neurons are ordered by their largest activation over the prompt, by their activation on the
selected token, or by index; the heatmap shows the first `rows` of that order. With "Diff" on
it shows masked minus clean activations, ordered by the largest absolute change.
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.heatmap import HeatmapExport, HeatmapView
from transformer_viewer.viewer.views.parts import (
    AdaptiveSplitter,
    DiffToggle,
    ExportButton,
    compact_axes,
    compact_table,
)

SORTS = {"max": "max activation", "token": "activation on the selected token", "index": "neuron index"}
TOP_K = 12


def mlp_matrix(trace, clean, layer: int, diff: bool) -> np.ndarray:
    """(n_mlp, T) float32 post-activations (or masked - clean) of `layer`, neurons on rows."""
    acts = trace.mlp_post[layer].astype(np.float32).T  # (T, n_mlp) -> (n_mlp, T)
    if diff:
        acts = acts - clean.mlp_post[layer].astype(np.float32).T
    return acts


def neuron_order(acts: np.ndarray, sort: str, query: int, diff: bool = False) -> np.ndarray:
    """Neuron indices in display order; ties keep index order (stable sort)."""
    if sort == "index":
        return np.arange(acts.shape[0])
    key = np.abs(acts) if diff else acts
    values = key.max(axis=1) if sort == "max" else key[:, query]
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; use one of {', '.join(SORTS)}")
    return np.argsort(-values, kind="stable")


def top_neurons(acts: np.ndarray, query: int, k: int = TOP_K, diff: bool = False) -> list[tuple[int, float]]:
    """The k neurons with the largest activation (|change| in diff mode) on token `query`."""
    col = acts[:, query]
    order = np.argsort(-(np.abs(col) if diff else col), kind="stable")[:k]
    return [(int(n), float(col[n])) for n in order]


class MLPView(HeatmapExport, QtWidgets.QWidget):
    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state = state
        self._order = np.zeros(0, dtype=np.int64)
        self.heatmap = HeatmapView()
        self.sort_combo = QtWidgets.QComboBox()
        for key, text in SORTS.items():
            self.sort_combo.addItem(text, key)
        self.sort_combo.setToolTip("Order of the neuron rows")
        self.sort_combo.currentIndexChanged.connect(self.refresh)
        self.rows_spin = QtWidgets.QSpinBox()
        self.rows_spin.setRange(1, 1 << 16)
        self.rows_spin.setValue(64)
        self.rows_spin.setPrefix("rows ")
        self.rows_spin.setToolTip("How many neurons (in the chosen order) the heatmap shows")
        self.rows_spin.valueChanged.connect(self.refresh)
        self.diff = DiffToggle(state)
        self.diff.toggled.connect(self.refresh)
        self.export_button = ExportButton(self, "mlp")
        self.top_table = QtWidgets.QTableWidget(0, 2)
        self.top_table.setHorizontalHeaderLabels(["neuron", "activation"])
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
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(bar)
        layout.addWidget(body, 1)

        self.heatmap.cell_clicked.connect(self._on_cell_click)
        state.trace_changed.connect(self.refresh)
        state.selection_changed.connect(self.refresh)
        state.neuron_changed.connect(lambda _n: self.refresh())
        self.refresh()

    # -- export protocol ------------------------------------------------------------------
    def set_sort(self, sort: str) -> None:
        self.sort_combo.setCurrentIndex(list(SORTS).index(sort))

    def order(self) -> np.ndarray:
        """Neuron index of each displayed row."""
        return self._order

    # -- drawing --------------------------------------------------------------------------
    def refresh(self, *_args) -> None:
        st = self.state
        trace = st.trace
        if trace is None:
            return
        layer, q = st.layer, st.query_index
        diff = self.diff.active
        acts = mlp_matrix(trace, st.clean_trace, layer, diff)  # (n_mlp, T)
        sort = self.sort_combo.currentData()
        order = neuron_order(acts, sort, q, diff)[: self.rows_spin.value()]
        self._order = order
        what = "masked − clean " if diff else ""
        model = " (masked model)" if trace.mask.any() and not diff else ""
        self.heatmap.set_data(acts[order], [f"n{n}" for n in order], trace.labels, levels=None, diverging=diff,
                              colormap=None if diff else "inferno",
                              title=f"{what}MLP post-activation, layer {layer}{model}",
                              row_name="neuron", col_name="token")
        compact_axes(self.heatmap)
        rows = np.flatnonzero(order == st.neuron) if st.neuron is not None else []
        self.heatmap.highlight_row(int(rows[0]) if len(rows) else None)
        top = top_neurons(acts, q, TOP_K, diff)
        self.top_title.setText(f"top neurons for {trace.labels[q]!r} ({q}), layer {layer}"
                               + (" — change when masked" if diff else ""))
        self.top_table.setRowCount(len(top))
        for i, (n, v) in enumerate(top):
            for j, text in enumerate((f"{n}", f"{v:+.4f}" if diff else f"{v:.4f}")):
                item = QtWidgets.QTableWidgetItem(text)
                item.setData(QtCore.Qt.ItemDataRole.UserRole, n)
                self.top_table.setItem(i, j, item)
            if n == st.neuron:
                self.top_table.selectRow(i)
        self.top_table.resizeColumnToContents(0)

    def top_list(self) -> list[tuple[int, float]]:
        """(neuron, value) rows of the top-k table as shown."""
        out = []
        for i in range(self.top_table.rowCount()):
            n = self.top_table.item(i, 0).data(QtCore.Qt.ItemDataRole.UserRole)
            out.append((int(n), float(self.top_table.item(i, 1).text())))
        return out

    def _on_cell_click(self, row: int, col: int) -> None:
        if 0 <= row < len(self._order):
            self.state.set_neuron(int(self._order[row]))
            self.state.set_selection(query=col)

    def _on_table_click(self, row: int, _col: int) -> None:
        item = self.top_table.item(row, 0)
        if item is not None:
            self.state.set_neuron(int(item.data(QtCore.Qt.ItemDataRole.UserRole)))

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(900, 520)
