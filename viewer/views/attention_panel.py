"""The attention heatmap with its controls: colormap, linear/log scale, and what to average.

Modes: "head" (the selected head), "layer-mean" (mean over the selected layer's heads) and
"head-mean" (mean over layers of the selected head index). `attention_matrix` is the pure part,
shared with `transformer-viewer export`.
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.heatmap import COLORMAPS, HeatmapExport, HeatmapView

MODES = {
    "head": "single head",
    "layer-mean": "mean of the layer's heads",
    "head-mean": "mean over layers (this head)",
}


def attention_matrix(attention: np.ndarray, layer: int, head: int, mode: str = "head",
                     mask: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """(T, T) float32 matrix and its title for `mode`, from attention (L, nh, T, T)."""
    L, nh = attention.shape[:2]
    if not 0 <= layer < L:
        raise ValueError(f"layer {layer} does not exist; the model has layers 0..{L - 1}")
    if not 0 <= head < nh:
        raise ValueError(f"head {head} does not exist; the model has heads 0..{nh - 1}")
    if mode == "head":
        m = attention[layer, head].astype(np.float32)  # (T, T)
        title = f"layer {layer} head {head}"
        if mask is not None and mask[layer, head]:
            title += " (masked)"
    elif mode == "layer-mean":
        m = attention[layer].astype(np.float32).mean(axis=0)  # (nh, T, T) -> (T, T)
        title = f"layer {layer} (mean of heads)"
    elif mode == "head-mean":
        m = attention[:, head].astype(np.float32).mean(axis=0)  # (L, T, T) -> (T, T)
        title = f"head {head} (mean over layers)"
    else:
        raise ValueError(f"unknown attention mode {mode!r}; use one of {', '.join(MODES)}")
    return m, title


class AttentionPanel(HeatmapExport, QtWidgets.QWidget):
    """A HeatmapView plus controls. With a `ViewerState` it follows the state's trace and
    selection (a click selects the query); without one, `set_trace(trace, layer, head, query)`
    draws."""

    cell_clicked = QtCore.Signal(int, int)
    hover_text_changed = QtCore.Signal(str)
    mode_changed = QtCore.Signal(str)

    def __init__(self, state=None, parent=None):
        super().__init__(parent)
        self.state = state
        self._trace = None
        self._layer, self._head, self._query = 0, 0, None
        self.heatmap = HeatmapView()

        self.colormap_combo = QtWidgets.QComboBox()
        self.colormap_combo.addItems(COLORMAPS)
        self.colormap_combo.setToolTip("Colour map of the heatmap")
        self.scale_combo = QtWidgets.QComboBox()
        self.scale_combo.addItems(["linear", "log"])
        self.scale_combo.setToolTip("Log scale shows small attention weights (down to 1e-4)")
        self.mode_combo = QtWidgets.QComboBox()
        for key, text in MODES.items():
            self.mode_combo.addItem(text, key)
        self.mode_combo.setToolTip("Show one head, or average the patterns")

        controls = QtWidgets.QHBoxLayout()
        controls.setContentsMargins(4, 2, 4, 0)
        for label, combo in (("Show", self.mode_combo), ("Colours", self.colormap_combo), ("Scale", self.scale_combo)):
            controls.addWidget(QtWidgets.QLabel(label))
            controls.addWidget(combo)
        controls.addStretch(1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(controls)
        layout.addWidget(self.heatmap, 1)

        self.colormap_combo.currentTextChanged.connect(self.heatmap.set_colormap)
        self.scale_combo.currentTextChanged.connect(lambda t: self.heatmap.set_log_scale(t == "log"))
        self.mode_combo.currentIndexChanged.connect(self._on_mode)
        self.heatmap.cell_clicked.connect(self.cell_clicked)
        self.heatmap.hover_text_changed.connect(self.hover_text_changed)
        if state is not None:
            self.cell_clicked.connect(lambda row, _col: state.set_selection(query=row))
            state.trace_changed.connect(self._on_trace)
            state.selection_changed.connect(self._on_selection)
            self._on_trace(state.trace)

    def _on_trace(self, trace) -> None:
        st = self.state
        if trace is None:
            return
        shown = self._trace
        if shown is not None and trace.attention is shown.attention and (st.layer, st.head) == (self._layer, self._head):
            # Only the prediction position moved (the handler shares the arrays): no redraw.
            self._trace = trace
            self.set_query(st.query_index)
        else:
            self.set_trace(trace, st.layer, st.head, st.query_index)

    def _on_selection(self) -> None:
        st = self.state
        if (st.layer, st.head) != (self._layer, self._head):
            self.set_trace(st.trace, st.layer, st.head, st.query_index)
        else:
            self.set_query(st.query_index)

    # -- state ----------------------------------------------------------------------------
    def set_trace(self, trace, layer: int | None = None, head: int | None = None, query: int | None = None) -> None:
        """Show `trace.attention` for (layer, head) in the current mode; `query` highlights a row."""
        self._trace = trace
        if layer is not None:
            self._layer = int(layer)
        if head is not None:
            self._head = int(head)
        self._query = query
        self._redraw()

    def set_selection(self, layer: int, head: int, query: int | None = None) -> None:
        self.set_trace(self._trace, layer, head, query)

    def set_query(self, query: int | None) -> None:
        self._query = query
        self.heatmap.highlight_row(query)

    def mode(self) -> str:
        return self.mode_combo.currentData()

    def set_mode(self, mode: str) -> None:
        index = self.mode_combo.findData(mode)
        if index < 0:
            raise ValueError(f"unknown attention mode {mode!r}; use one of {', '.join(MODES)}")
        self.mode_combo.setCurrentIndex(index)

    def set_colormap(self, name: str) -> None:
        if self.colormap_combo.findText(name) < 0:
            self.colormap_combo.addItem(name)
        self.colormap_combo.setCurrentText(name)
        self.heatmap.set_colormap(name)

    def set_log_scale(self, on: bool) -> None:
        self.scale_combo.setCurrentText("log" if on else "linear")

    def title(self) -> str:
        return self.heatmap.title()

    def _on_mode(self, _index: int) -> None:
        self._redraw()
        self.mode_changed.emit(self.mode())

    def _redraw(self) -> None:
        trace = self._trace
        if trace is None:
            return
        m, title = attention_matrix(trace.attention, self._layer, self._head, self.mode(), trace.mask)
        labels = tuple(trace.labels)
        self.heatmap.set_data(m, labels, labels, levels=(0, 1), colormap=self.colormap_combo.currentText(),
                              log_scale=self.scale_combo.currentText() == "log", title=title)
        self.heatmap.highlight_row(self._query)
