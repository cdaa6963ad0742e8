"""The attention heatmap with its controls: colormap, linear/log scale, what to average, and
how a long prompt's overview pools.

Modes: "head" (the selected head), "layer-mean" (mean over the selected layer's heads) and
"head-mean" (mean over layers of the selected head index). At any length the heatmap shows the
trace's pooled overview of the whole prompt (each entry the max or the mean of a block of
tokens; the pattern itself up to 256 tokens); zoomed in, the visible part is drawn at full
resolution over it, cut from the full patterns when the trace has them, else asked of the
worker (a single head's tile). `attention_matrix` is the pure part, shared with
`transformer-viewer export`.
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.heatmap import COLORMAPS, HeatmapExport
from transformer_viewer.viewer.views.shown_refresh import RefreshWhenShown, when_shown
from transformer_viewer.viewer.views.tile_loader import TileLoader
from transformer_viewer.viewer.views.zoom_heatmap import ZoomHeatmap
from transformer_viewer.viewer.worker.patterns import PatternTileRequest, tile_source

MODES = {
    "head": "single head",
    "layer-mean": "mean of the layer's heads",
    "head-mean": "mean over layers (this head)",
}
POOLINGS = {"max": "max of each block", "mean": "mean of each block"}


def overview_of(trace, pooling: str = "max") -> tuple[np.ndarray, int]:
    """(L, nh, n, n) pooled patterns of `trace` and the tokens per cell side."""
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
    return (trace.overview_max if pooling == "max" else trace.overview_mean), int(trace.overview_cell)


def attention_matrix(attention: np.ndarray, layer: int, head: int, mode: str = "head",
                     mask: np.ndarray | None = None) -> tuple[np.ndarray, str]:
    """(T, T) float32 matrix and its title for `mode`, from attention (L, nh, T, T) (or from a
    pooled overview (L, nh, n, n): then (n, n))."""
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


def attention_block(attention: np.ndarray, layer: int, head: int, mode: str, rows: tuple[int, int],
                    cols: tuple[int, int]) -> np.ndarray:
    """The rows x cols block of `attention_matrix(attention, layer, head, mode)`, float32."""
    (r0, r1), (c0, c1) = rows, cols
    if mode == "head":
        return attention[layer, head, r0:r1, c0:c1].astype(np.float32)
    if mode == "layer-mean":
        return attention[layer, :, r0:r1, c0:c1].astype(np.float32).mean(axis=0)  # (nh, r, c) -> (r, c)
    return attention[:, head, r0:r1, c0:c1].astype(np.float32).mean(axis=0)  # (L, r, c) -> (r, c)


class AttentionPanel(RefreshWhenShown, HeatmapExport, QtWidgets.QWidget):
    """A HeatmapView plus controls. With a `ViewerState` it follows the state's trace and
    selection (a click selects the query); without one, `set_trace(trace, layer, head, query)`
    draws."""

    cell_clicked = QtCore.Signal(int, int)
    hover_text_changed = QtCore.Signal(str)
    mode_changed = QtCore.Signal(str)

    def __init__(self, state=None, worker=None, parent=None):
        super().__init__(parent)
        self.state = state
        self._trace = None
        self._layer, self._head, self._query = 0, 0, None
        self.heatmap = ZoomHeatmap()
        self.tiles = TileLoader(self.heatmap, worker, self)

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
        self.pooling_combo = QtWidgets.QComboBox()
        for key, text in POOLINGS.items():
            self.pooling_combo.addItem(text, key)
        self.pooling_combo.setToolTip("A long prompt's overview shows each block of tokens by its largest weight "
                                      "(sharp patterns stay visible) or its mean; zoom in for single tokens")

        controls = QtWidgets.QHBoxLayout()
        controls.setContentsMargins(4, 2, 4, 0)
        self.pooling_label = QtWidgets.QLabel("Blocks")
        for label, combo in ((QtWidgets.QLabel("Show"), self.mode_combo), (self.pooling_label, self.pooling_combo),
                             (QtWidgets.QLabel("Colours"), self.colormap_combo),
                             (QtWidgets.QLabel("Scale"), self.scale_combo)):
            controls.addWidget(label)
            controls.addWidget(combo)
        self._show_pooling(False)  # only a pooled overview (a prompt over 256 tokens) has blocks
        controls.addStretch(1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(controls)
        layout.addWidget(self.heatmap, 1)

        self.colormap_combo.currentTextChanged.connect(self.heatmap.set_colormap)
        self.scale_combo.currentTextChanged.connect(lambda t: self.heatmap.set_log_scale(t == "log"))
        self.mode_combo.currentIndexChanged.connect(self._on_mode)
        self.pooling_combo.currentIndexChanged.connect(lambda _i: self._redraw())
        self.heatmap.cell_clicked.connect(self.cell_clicked)
        self.heatmap.hover_text_changed.connect(self.hover_text_changed)
        if state is not None:
            self.cell_clicked.connect(lambda row, _col: state.set_selection(query=row))
            state.trace_changed.connect(lambda _t: self.refresh())
            state.selection_changed.connect(self.refresh)
            self.refresh()

    @when_shown
    def refresh(self) -> None:
        """Follow the state: redraw for another trace or head, move the highlighted row otherwise."""
        st = self.state
        trace, shown = st.trace, self._trace
        if trace is None:
            return
        if (shown is not None and trace.overview_max is shown.overview_max
                and (st.layer, st.head) == (self._layer, self._head)):
            # The same patterns (a new query, or only the prediction position moved: the
            # handler shares the arrays): no redraw.
            self._trace = trace
            self.set_query(st.query_index)
        else:
            self.set_trace(trace, st.layer, st.head, st.query_index)

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

    # -- what .npy and .csv export write ---------------------------------------------------
    def matrix(self) -> np.ndarray:
        """The shown matrix at full resolution when the trace holds the full patterns, else the
        pooled overview drawn (the selected head's whole pattern exports from File > Export)."""
        trace = self._trace
        if trace is not None and trace.attention is not None and self.heatmap.cell() > 1:
            return attention_matrix(trace.attention, self._layer, self._head, self.mode(), trace.mask)[0]
        return self.heatmap.matrix()

    def row_labels(self):
        return self._labels_of(self.heatmap.row_labels())

    def col_labels(self):
        return self._labels_of(self.heatmap.col_labels())

    def _labels_of(self, labels):
        """Token labels for a full-resolution matrix; "first..last" token positions per block
        of a pooled one."""
        w = self.heatmap.cell()
        if w == 1 or len(self.matrix()) == len(labels):
            return labels
        n = len(labels)
        return tuple(f"{a}..{min(a + w, n) - 1}" for a in range(0, n, w))

    def _show_pooling(self, on: bool) -> None:
        self.pooling_label.setVisible(on)
        self.pooling_combo.setVisible(on)

    def pooling(self) -> str:
        return self.pooling_combo.currentData()

    def set_pooling(self, pooling: str) -> None:
        index = self.pooling_combo.findData(pooling)
        if index < 0:
            raise ValueError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
        self.pooling_combo.setCurrentIndex(index)

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
        overview, cell = overview_of(trace, self.pooling())
        layer, head, mode = self._layer, self._head, self.mode()
        m, title = attention_matrix(overview, layer, head, mode, trace.mask)
        self._show_pooling(cell > 1)
        labels = tuple(trace.labels)
        self.heatmap.set_data(m, labels, labels, levels=(0, 1), colormap=self.colormap_combo.currentText(),
                              log_scale=self.scale_combo.currentText() == "log", title=title, cell=cell,
                              pooling=self.pooling())
        self.heatmap.highlight_row(self._query)
        full = trace.attention
        if full is not None:
            self.tiles.set_source(("full", id(full), layer, head, mode),
                                  local=lambda rows, cols: attention_block(full, layer, head, mode, rows, cols))
        elif mode == "head":
            run = trace.run_id
            self.tiles.set_source(tile_source(run, layer, head), request=lambda rows, cols: PatternTileRequest(
                run_id=run, layer=layer, head=head, rows=rows, cols=cols))
        else:
            self.tiles.set_source(None)  # a mean of heads at full resolution would need every head's tile
