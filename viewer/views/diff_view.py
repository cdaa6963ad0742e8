"""Attention diff: the attention pattern of the selected head under the intervention (masked
heads, feature clamps) minus the clean one.

Masking a head leaves the patterns of its own and earlier layers as they were; the heads of
later layers read a changed residual stream and attend differently (a clamp likewise changes
the layers after its SAE's hook). This view shows by how much, on a diverging scale centred at
zero (exactly zero when nothing is masked or clamped).

A long prompt's difference is drawn from the two traces' mean-pooled overviews: a mean is
linear, so the difference of block means is the block mean of the difference, exactly.
Zoomed in, the visible part is drawn at full resolution over it, cut from the full patterns
when the traces have them, else asked of the worker (both runs' tiles, subtracted there).
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.heatmap import HeatmapExport
from transformer_viewer.viewer.views.parts import ExportButton, bar_over, run_name, view_bar
from transformer_viewer.viewer.views.shown_refresh import RefreshWhenShown, when_shown
from transformer_viewer.viewer.views.tile_loader import TileLoader
from transformer_viewer.viewer.views.zoom_heatmap import ZoomHeatmap
from transformer_viewer.viewer.worker.patterns import PatternDiffRequest, diff_source


def attention_diff(trace, clean, layer: int, head: int) -> np.ndarray:
    """(n, n) float32 intervened - clean pattern (rows are queries), pooled by block means when the
    traces' overviews are (n = T when the overview is the pattern)."""
    return trace.overview_mean[layer, head].astype(np.float32) - clean.overview_mean[layer, head].astype(np.float32)


class AttentionDiffView(RefreshWhenShown, HeatmapExport, QtWidgets.QWidget):
    def __init__(self, state, worker=None, parent=None):
        super().__init__(parent)
        self.state = state
        self.heatmap = ZoomHeatmap()
        self.tiles = TileLoader(self.heatmap, worker, self)
        self.info = QtWidgets.QLabel("")
        self.info.setWordWrap(True)
        self.export_button = ExportButton(self, "attention_diff")
        bar = view_bar(self.info, self.export_button)
        bar_over(self, bar, self.heatmap)
        self.heatmap.cell_clicked.connect(lambda row, _c: state.set_selection(query=row))
        state.trace_changed.connect(self.refresh)
        state.selection_changed.connect(self.refresh)
        self._shown = None  # (trace, clean, layer, head) drawn
        self.refresh()

    @when_shown
    def refresh(self, *_args) -> None:
        st = self.state
        trace, clean = st.trace, st.clean_trace
        if trace is None or clean is None or clean.n_tokens != trace.n_tokens:
            return
        layer, head = st.layer, st.head
        if not (0 <= layer < trace.mask.shape[0] and 0 <= head < trace.mask.shape[1]):
            return  # a newly loaded model's first trace is on its way
        shown = self._shown
        if shown is not None and shown[0] is trace and shown[1] is clean and shown[2:] == (layer, head):
            self.heatmap.highlight_row(st.query_index)  # only the query moved
            return
        self._shown = (trace, clean, layer, head)
        m = attention_diff(trace, clean, layer, head)
        cell = trace.overview_cell
        title = f"{run_name(trace.intervention)} − clean attention, layer {layer} head {head}"
        self.heatmap.set_data(m, trace.labels, trace.labels, levels=None, diverging=True, title=title, cell=cell,
                              pooling="mean")
        self.heatmap.highlight_row(st.query_index)
        self._set_tiles(trace, clean, layer, head)
        clamped = bool(trace.intervention.clamps)
        if not trace.mask.any() and not clamped:
            self.info.setText("No head is masked and no feature clamped: the difference is exactly zero. "
                              "Mask a head or clamp a feature to see how the heads of later layers change "
                              "where they look.")
        else:
            # A clamp changes the run from its SAE's layer on, which the view does not know: no "unchanged" then.
            first = int(np.flatnonzero(trace.mask.any(axis=1))[0]) if not clamped else -1
            note = (" — unchanged: no masked head's output reaches this layer's attention"
                    if layer <= first else "")
            what = "largest change" if cell == 1 else "largest change of a block mean"
            self.info.setText(f"{what} {np.abs(m).max():.4f}{note}")

    def _set_tiles(self, trace, clean, layer: int, head: int) -> None:
        if trace.attention is not None and clean.attention is not None:
            a, b = trace.attention, clean.attention

            def local(rows, cols):
                (r0, r1), (c0, c1) = rows, cols
                return a[layer, head, r0:r1, c0:c1].astype(np.float32) - b[layer, head, r0:r1, c0:c1].astype(np.float32)

            self.tiles.set_source(("full", id(a), id(b), layer, head), local=local)
            return
        run, base = trace.run_id, clean.run_id
        self.tiles.set_source(diff_source(run, base, layer, head), request=lambda rows, cols: PatternDiffRequest(
            run_id=run, base_run_id=base, layer=layer, head=head, rows=rows, cols=cols))

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(640, 600)
