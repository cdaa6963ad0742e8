"""Attention rollout (model/analysis/rollout.py, Abnar & Zuidema 2020) shown like a head's pattern:
query rows, key columns, each row the query's share of each input token after the chosen layers,
with the residual stream as the identity, each layer's heads combined by their mean, their
maximum, or the mean of heads the user chooses ("L.H, L.H": a layer with none of them passes
only its residual).

One row needs every lower layer's pattern rows up to it, so the view never asks for the whole
(T, T) product: it shows the block of BLOCK_ROWS query rows around the selected query, asked of
the worker when first shown (a block at the end of a 4,096-token prompt costs about the
attention part of one capture; at 8,192 tokens four times that), and keeps the blocks it got per
layer range, head combination and residual choice (the last CACHE_BLOCKS of them), so going back
to a range is immediate. While the tab is shown, the token strip colours each token by the
selected query's row. A click on a row selects that query in every view.
"""

from __future__ import annotations

from collections import OrderedDict

from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.answers import same_request
from transformer_viewer.viewer.views.empty_state import EmptyState
from transformer_viewer.viewer.views.heatmap import HeatmapExport, HeatmapView
from transformer_viewer.viewer.views.parts import ExportButton, bar_over, view_bar

BLOCK_ROWS = 256  # query rows asked for at once (model/analysis/rollout.py takes up to 512)
CACHE_BLOCKS = 16  # blocks kept: 16 x 256 rows x 8,192 keys x 4 bytes = 128 MB at most
HEADS = ("mean", "max", "chosen")


def block_of(query: int, n_tokens: int, rows: int | None = None) -> tuple[int, int]:
    """The rows first..stop-1 of the block (of BLOCK_ROWS rows) that holds `query`."""
    rows = BLOCK_ROWS if rows is None else rows
    first = query // rows * rows
    return first, min(n_tokens, first + rows)


class RolloutView(HeatmapExport, QtWidgets.QWidget):
    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.result = None  # RolloutRows drawn
        self.cache: OrderedDict[tuple, object] = OrderedDict()  # key() -> RolloutRows
        self._pending = None
        self._pending_key: tuple | None = None
        self.dropped = 0
        self.heatmap = HeatmapView()
        self.first_layer = QtWidgets.QSpinBox()
        self.last_layer = QtWidgets.QSpinBox()
        self.first_layer.setToolTip("The first layer rolled out")
        self.last_layer.setToolTip("The last layer rolled out (included)")
        self.heads = QtWidgets.QComboBox()
        for h in HEADS:
            self.heads.addItem(f"heads: {h}", h)
        self.chosen = QtWidgets.QLineEdit()
        self.chosen.setPlaceholderText("L.H, L.H")
        self.chosen.setToolTip("The heads whose mean each layer uses (0-based layer.head, comma separated); a layer "
                               "with none of them passes only its residual")
        self.chosen.setMinimumWidth(110)
        self.chosen.hide()
        self.residual = QtWidgets.QCheckBox("residual")
        self.residual.setChecked(True)
        self.residual.setToolTip("Add the identity for the residual stream to each layer, (A + I) / 2, rows "
                                 "renormalised")
        self.info = QtWidgets.QLabel("computing the rollout\u2026")
        self.info.setWordWrap(True)
        self.export_button = ExportButton(self, "rollout")
        bar = view_bar(self.info, self.export_button, QtWidgets.QLabel("layers"), self.first_layer,
                       QtWidgets.QLabel("to"), self.last_layer, self.heads, self.chosen, self.residual)
        bar_over(self, bar, self.heatmap)
        self.cover = EmptyState(self.heatmap)
        self.cover.show_message("computing the rollout\u2026")
        for spin in (self.first_layer, self.last_layer):
            spin.valueChanged.connect(self._on_range)
        self.heads.currentIndexChanged.connect(self._on_heads)
        self.chosen.editingFinished.connect(self.request)
        self.residual.toggled.connect(lambda _on: self.request())
        self.heatmap.cell_clicked.connect(lambda row, _col: self._select_row(row))
        state.model_changed.connect(self._on_model)
        state.trace_changed.connect(self._on_trace)
        state.selection_changed.connect(self.request)
        self._on_model(state.model_info)

    # -- controls -------------------------------------------------------------------------
    def _on_model(self, _info) -> None:
        L = self.state.n_layer
        for spin in (self.first_layer, self.last_layer):
            spin.blockSignals(True)
            spin.setRange(0, L - 1)
        self.first_layer.setValue(0)
        self.last_layer.setValue(L - 1)
        for spin in (self.first_layer, self.last_layer):
            spin.blockSignals(False)
        self.cache.clear()

    def _on_range(self) -> None:
        if self.first_layer.value() > self.last_layer.value():  # keep a range: move the other end
            other = self.last_layer if self.sender() is self.first_layer else self.first_layer
            other.blockSignals(True)
            other.setValue(self.sender().value())
            other.blockSignals(False)
        self.request()

    def set_options(self, layers: tuple[int, int] | None = None, heads=None, residual: bool | None = None) -> None:
        """Layers (a, b): a..b-1; heads "mean", "max" or (layer, head) pairs; the residual term on or off."""
        for w in (self.first_layer, self.last_layer, self.heads, self.chosen, self.residual):
            w.blockSignals(True)
        try:
            if layers is not None:
                self.first_layer.setValue(int(layers[0]))
                self.last_layer.setValue(int(layers[1]) - 1)
            if isinstance(heads, str):
                self.heads.setCurrentIndex(HEADS.index(heads))
            elif heads is not None:
                self.heads.setCurrentIndex(HEADS.index("chosen"))
                self.chosen.setText(", ".join(f"{layer}.{head}" for layer, head in heads))
            self.chosen.setVisible(self.heads.currentData() == "chosen")
            if residual is not None:
                self.residual.setChecked(bool(residual))
        finally:
            for w in (self.first_layer, self.last_layer, self.heads, self.chosen, self.residual):
                w.blockSignals(False)
        self.request()

    def _on_heads(self, _index: int) -> None:
        chosen = self.heads.currentData() == "chosen"
        self.chosen.setVisible(chosen)
        if chosen and not self.chosen.text().strip():  # start from the selected head
            self.chosen.setText(f"{self.state.layer}.{self.state.head}")
        self.request()

    def head_choice(self):
        """"mean", "max", or the chosen heads as sorted (layer, head) pairs; None when the text
        names no head of this model."""
        from transformer_viewer.model.capture.prompts import parse_layer_head

        how = self.heads.currentData()
        if how != "chosen":
            return how
        pairs = [parse_layer_head(item) for item in self.chosen.text().split(",") if item.strip()]
        st = self.state
        if not pairs or any(p is None or not (0 <= p[0] < st.n_layer and 0 <= p[1] < st.n_head) for p in pairs):
            return None
        return tuple(sorted(set(pairs)))

    def layers(self) -> tuple[int, int]:
        return self.first_layer.value(), self.last_layer.value() + 1

    def _select_row(self, row: int) -> None:
        if self.result is not None:
            self.state.set_selection(query=self.result.first + row)

    # -- requests -------------------------------------------------------------------------
    def key(self) -> tuple | None:
        """What the view shows now: (run, layers, heads, residual, block), or None without a trace."""
        st = self.state
        if st.trace is None:
            return None
        return (st.trace.run_id, st.trace.intervention, self.layers(), self.head_choice(), self.residual.isChecked(),
                block_of(st.query_index, st.trace.n_tokens))

    def _on_trace(self, trace) -> None:
        self.state.set_token_overlay(None, owner=self)
        if trace is None:
            self.result = None
            self._say("run a prompt to see the attention rollout")
        self.request()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        self.request()

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().hideEvent(event)
        self.state.set_token_overlay(None, owner=self)

    def _say(self, text: str) -> None:
        self.info.setText(text)
        self.cover.show_message(text if self.result is None else None)

    def request(self) -> None:
        """Draw the block around the selected query from the cache, or ask the worker for it."""
        from transformer_viewer.viewer.worker.rollout import RolloutRequest

        st = self.state
        key = self.key()
        if key is None or not self.isVisible():
            return
        if key[3] is None:
            self._say(f"heads: write the chosen heads as layer.head, comma separated (layers 0..{st.n_layer - 1}, "
                      f"heads 0..{st.n_head - 1}), e.g. {st.layer}.{st.head}")
            return
        if key in self.cache:
            self.cache.move_to_end(key)
            self._draw(self.cache[key])
            return
        if key == self._pending_key:
            return
        first, stop = key[-1]
        heads = key[3] if isinstance(key[3], str) else list(key[3])
        request = RolloutRequest(text=st.prompt, first=first, stop=stop, layers=key[2], heads=heads,
                                 residual=key[4], intervention=st.trace.intervention)
        self._pending, self._pending_key = request, key
        a, b = key[2]
        self._say(f"computing the rollout of layers {a}..{b - 1}, rows {first}..{stop - 1}\u2026")
        self.worker.submit(request, on_result=lambda answer, k=key: self._on_result(answer, k),
                           on_failure=self._on_failed)

    def _on_result(self, answer, key) -> None:
        if not same_request(answer.request, self._pending):
            self.dropped += 1  # asked for another range or block since
            return
        self._pending, self._pending_key = None, None
        self.cache[key] = answer.value
        while len(self.cache) > CACHE_BLOCKS:
            self.cache.popitem(last=False)
        if key == self.key():
            self._draw(answer.value)

    def _on_failed(self, failure) -> None:
        self._pending, self._pending_key = None, None
        stopped = "stopped" if failure.cancelled else failure.message
        self._say(f"rollout {stopped}; select a token or change the range to compute it again")

    # -- drawing --------------------------------------------------------------------------
    def _draw(self, rows) -> None:
        st, trace = self.state, self.state.trace
        self.result = rows
        r = rows.rows
        first = rows.first
        labels = trace.labels if trace is not None and len(trace.labels) == r.shape[1] else tuple(
            str(i) for i in range(r.shape[1]))
        a, b = rows.layers
        residual = "with" if rows.residual else "without"
        self.heatmap.set_data(r, labels[first:first + r.shape[0]], labels, levels=(0.0, float(max(r.max(), 1e-9))),
                              title=f"rollout of layers {a}..{b - 1}, heads {rows.heads}, {residual} the residual",
                              row_name="query", col_name="token")
        q = st.query_index
        self.heatmap.highlight_row(None if q is None else q - first)
        shown = f"rows {first}..{first + r.shape[0] - 1} of {r.shape[1]}" if r.shape[0] < r.shape[1] else "every row"
        self._say(f"{shown}; each row: the query's share of each token (sums to 1). A block of rows costs "
                  f"every layer's pattern rows up to its last query")
        if q is not None and first <= q < first + r.shape[0] and self.isVisible():
            st.set_token_overlay(r[q - first], f"rollout from {labels[q]!r} ({q}), layers {a}..{b - 1}, heads "
                                               f"{rows.heads}: the query's share of each token", owner=self)

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(800, 640)

