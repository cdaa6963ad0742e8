"""Attention diff: masked minus clean attention pattern of the selected head.

Masking a head leaves the patterns of its own and earlier layers as they were; the heads of
later layers read a changed residual stream and attend differently. This view shows by how
much, on a diverging scale centred at zero (exactly zero when nothing is masked).
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.heatmap import HeatmapExport, HeatmapView
from transformer_viewer.viewer.views.parts import ExportButton, view_bar


def attention_diff(trace, clean, layer: int, head: int) -> np.ndarray:
    """(T, T) float32 masked - clean pattern (rows are queries)."""
    return trace.attention[layer, head].astype(np.float32) - clean.attention[layer, head].astype(np.float32)


class AttentionDiffView(HeatmapExport, QtWidgets.QWidget):
    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state = state
        self.heatmap = HeatmapView()
        self.info = QtWidgets.QLabel("")
        self.info.setWordWrap(True)
        self.export_button = ExportButton(self, "attention_diff")
        bar = view_bar(self.info, self.export_button)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(bar)
        layout.addWidget(self.heatmap, 1)
        self.heatmap.cell_clicked.connect(lambda row, _c: state.set_selection(query=row))
        state.trace_changed.connect(self.refresh)
        state.selection_changed.connect(self.refresh)
        self.refresh()

    def refresh(self, *_args) -> None:
        st = self.state
        trace, clean = st.trace, st.clean_trace
        if trace is None or clean is None or clean.n_tokens != trace.n_tokens:
            return
        layer, head = st.layer, st.head
        m = attention_diff(trace, clean, layer, head)
        self.heatmap.set_data(m, trace.labels, trace.labels, levels=None, diverging=True,
                              title=f"masked − clean attention, layer {layer} head {head}")
        self.heatmap.highlight_row(st.query_index)
        if not trace.mask.any():
            self.info.setText("No head is masked: the difference is exactly zero. Mask a head to see "
                              "how the heads of later layers change where they look.")
        else:
            first = int(np.flatnonzero(trace.mask.any(axis=1))[0])
            note = (" — unchanged: no masked head's output reaches this layer's attention"
                    if layer <= first else "")
            self.info.setText(f"largest change {np.abs(m).max():.4f}{note}")

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(640, 600)
