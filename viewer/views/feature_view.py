"""One SAE feature across the prompt, and the SAE's layer at a glance.

Top: the selected feature's activation at every position, as a line (the selected token
marked; a click selects a token) and, while the view is shown, as the token strip's colouring.
Beside it: its decoder direction's direct effect on the logits (the tokens it promotes and
suppresses through the final norm, whose scale is held frozen, and the unembedding: an
approximation that leaves out every later layer), and its share of the reconstruction at the
selected token. Below: the layer's overview through the SAE: features firing per token (L0),
the fraction of variance it leaves unexplained, and the next-token KL when its reconstruction
replaces the activation. The clamp controls clamp the feature shown.

A feature's full row is computed on demand (`FeatureRequest`), one feature at a time; the
overview once per run and SAE (`SaeOverviewRequest`). The view asks only while it is shown.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.answers import same_request
from transformer_viewer.viewer.views.clamp_controls import ClampControls
from transformer_viewer.viewer.views.empty_state import EmptyState
from transformer_viewer.viewer.views.logits_panel import token_label
from transformer_viewer.viewer.views.parts import MAIN_PEN, SELECT_PEN, compact_table, depth_plot

EFFECT_NOTE = ("Direct effect on the logits: its decoder direction through the final norm, its scale "
               "frozen at the token (an approximation), and the unembedding.")


def starts_with_bos(trace) -> bool:
    """Whether `trace`'s first token is a special one (BOS), as model/analysis/sae_features.py decides."""
    return trace is not None and bool(trace.special) and bool(trace.special[0])


def _position_plot(left: str, bottom: str = "") -> pg.PlotWidget:
    plot = depth_plot(left=left, bottom=bottom)
    plot.setMinimumSize(160, 90)
    return plot


class FeatureView(QtWidgets.QWidget):
    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.result = None  # FeatureDetail drawn
        self.overview = None  # SaeOverview drawn
        self._pending = None
        self._pending_overview = None
        self._result_key = None
        self._overview_key = None
        self.feature_box = QtWidgets.QSpinBox()
        self.feature_box.setPrefix("feature ")
        self.feature_box.setToolTip("The feature shown (its id in the SAE)")
        self.feature_box.setKeyboardTracking(False)
        self.feature_box.setSpecialValueText("feature \u2013")  # -1: none selected yet
        self.feature_label = QtWidgets.QLabel()
        self.info = QtWidgets.QLabel()
        self.info.setWordWrap(True)
        bar = QtWidgets.QHBoxLayout()
        bar.setContentsMargins(4, 2, 4, 0)
        bar.addWidget(self.feature_box)
        bar.addWidget(self.feature_label)
        bar.addWidget(self.info, 1)
        self.row_plot = _position_plot("activation")
        self.l0_plot = _position_plot("L0", "position")
        self.l0_plot.setToolTip("Features firing at each token (L0) through the SAE")
        self.cursor = pg.InfiniteLine(angle=90, movable=False, pen=SELECT_PEN)
        self.row_plot.addItem(self.cursor, ignoreBounds=True)
        self.row_plot.scene().sigMouseClicked.connect(self._on_plot_click)
        self.overview_text = QtWidgets.QLabel()
        self.overview_text.setWordWrap(True)
        self.share_text = QtWidgets.QLabel()
        self.share_text.setWordWrap(True)
        self.effect_note = note = QtWidgets.QLabel(EFFECT_NOTE)
        note.setWordWrap(True)
        note.setStyleSheet("color: #555;")
        self.promoted = self._effect_table("promotes")
        self.suppressed = self._effect_table("suppresses")
        effects = QtWidgets.QWidget()
        effects_lay = QtWidgets.QGridLayout(effects)
        effects_lay.setContentsMargins(2, 0, 2, 2)
        effects_lay.addWidget(note, 0, 0, 1, 2)
        effects_lay.addWidget(self.promoted, 1, 0)
        effects_lay.addWidget(self.suppressed, 1, 1)
        effects_lay.setRowStretch(1, 1)
        self.clamp_controls = ClampControls(state, rows=2)
        text = QtWidgets.QWidget()
        text_lay = QtWidgets.QVBoxLayout(text)
        text_lay.setContentsMargins(2, 0, 4, 2)
        text_lay.addWidget(self.share_text)
        text_lay.addWidget(self.overview_text)
        text_lay.addStretch(1)
        text_lay.addWidget(self.clamp_controls)
        plots = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        plots.addWidget(self.row_plot)
        plots.addWidget(self.l0_plot)
        plots.setSizes([220, 110])
        lower = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        lower.addWidget(effects)
        lower.addWidget(text)
        lower.setSizes([380, 320])
        # The positions across the full width above; what the feature does, and the layer, below.
        body = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        body.addWidget(plots)
        body.addWidget(lower)
        body.setSizes([330, 260])
        for split in (plots, lower, body):
            split.setChildrenCollapsible(False)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(body, 1)
        self.body = body
        self.cover = EmptyState(body)
        saes = state.saes
        self.feature_box.valueChanged.connect(lambda v: saes.set_feature(v if v >= 0 else None))
        saes.saes_changed.connect(self.request)
        saes.feature_changed.connect(self.request)
        saes.labels_changed.connect(lambda _i: self._label_feature())
        saes.bos_changed.connect(lambda _b: self.request())
        state.trace_changed.connect(lambda _t: self.request())
        state.selection_changed.connect(self.request)
        self.request()

    @staticmethod
    def _effect_table(title: str) -> QtWidgets.QTableWidget:
        table = QtWidgets.QTableWidget(0, 2)
        table.setHorizontalHeaderLabels((title, "logit"))
        compact_table(table)
        table.horizontalHeader().setSectionResizeMode(0, QtWidgets.QHeaderView.ResizeMode.Stretch)
        table.horizontalHeader().setSectionResizeMode(1, QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.NoSelection)
        table.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        table.setMinimumWidth(120)
        return table

    # -- asking ---------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        self.info.setText(text)
        self.cover.show_message(text if self.result is None else None)

    def _sync_feature_box(self) -> None:
        saes = self.state.saes
        sae = saes.selected()
        self.feature_box.blockSignals(True)
        self.feature_box.setRange(-1, (sae.d_sae - 1) if sae else -1)
        self.feature_box.setEnabled(sae is not None)
        self.feature_box.setValue(-1 if saes.feature is None else saes.feature)
        self.feature_box.blockSignals(False)
        self._label_feature()

    def _label_feature(self) -> None:
        saes = self.state.saes
        text = saes.label(saes.sae, saes.feature) if saes.sae is not None and saes.feature is not None else ""
        self.feature_label.setText(f"\u201c{text}\u201d" if text else "")

    def key(self):
        st, saes = self.state, self.state.saes
        if st.trace is None or saes.sae is None or saes.feature is None:
            return None
        return st.trace.run_id, saes.sae, saes.feature, st.query_index

    def request(self) -> None:
        from transformer_viewer.viewer.worker.sae import FeatureRequest, SaeOverviewRequest

        st, saes = self.state, self.state.saes
        self._sync_feature_box()
        if not saes.attached:
            self.result = self.overview = None
            self._result_key = None  # nothing drawn: the same feature asked again is asked anew
            self._clear_overlay()
            self._say("No SAE open: File > Open SAE\u2026 (or Open the bundled SAE) attaches one.")
            return
        if st.trace is None:
            self._say("Run a prompt to see its features.")
            return
        if not self.isVisible():
            return
        overview_key = (st.trace.run_id, saes.sae, saes.show_bos)
        if overview_key != self._overview_key:
            request = SaeOverviewRequest(text=st.prompt, sae_index=saes.sae, intervention=st.trace.intervention,
                                         skip_bos=not saes.show_bos)
            if not same_request(request, self._pending_overview):
                self._pending_overview = request
                self.worker.submit(request, on_result=lambda a, k=overview_key: self._on_overview(a, k),
                                   on_failure=self._on_overview_failed)
        key = self.key()
        if key is None:
            self.result, self._result_key = None, None
            self._clear_overlay()
            self._say("Select a feature in the Features panel, or type its id.")
            return
        if key == self._result_key:
            self._draw()  # the BOS choice, a label or the visibility changed: drawn again
            return
        request = FeatureRequest(text=st.prompt, sae_index=key[1], feature=key[2], position=key[3],
                                 intervention=st.trace.intervention)
        if same_request(request, self._pending):
            return
        self._pending = request
        self._say(f"computing feature {key[2]}\u2026")
        self.worker.submit(request, on_result=lambda a, k=key: self._on_result(a, k), on_failure=self._on_failed)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        self.request()
        self._draw_row()

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().hideEvent(event)
        self._clear_overlay()

    def _on_result(self, answer, key) -> None:
        if not same_request(answer.request, self._pending):
            return
        self._pending = None
        self.result, self._result_key = answer.value, key
        if key != self.key():
            self.request()
            return
        self._draw()

    def _on_failed(self, failure) -> None:
        self._pending = None
        self._say("stopped; select the feature again to compute it" if failure.cancelled else failure.message)

    def _on_overview(self, answer, key) -> None:
        if not same_request(answer.request, self._pending_overview):
            return
        self._pending_overview = None
        self.overview, self._overview_key = answer.value, key
        self._draw_overview()

    def _on_overview_failed(self, failure) -> None:
        self._pending_overview = None
        self.overview_text.setText("overview stopped" if failure.cancelled else failure.message)

    # -- drawing --------------------------------------------------------------------------
    def shown_row(self) -> np.ndarray | None:
        """The feature's row as drawn: the BOS token's activation left out (0) unless the lists show it."""
        st = self.state
        if self.result is None:
            return None
        row = np.asarray(self.result.row, dtype=np.float32).copy()
        if not st.saes.show_bos and row.size and starts_with_bos(st.trace):
            row[0] = 0.0
        return row

    def _draw(self) -> None:
        r = self.result
        self._draw_row()
        self._draw_effect()
        q = self.state.query_index
        labels = self.state.trace.labels if self.state.trace is not None else ()
        where = f"{r.position} {labels[r.position]!r}" if r.position < len(labels) else str(r.position)
        self.share_text.setText(f"At {where}: activation {float(r.row[r.position]):.3g}, "
                                f"{100 * r.share:.1f}% of the reconstruction (activation \u00d7 decoder norm, "
                                f"over all features).")
        row = self.shown_row()
        peak = int(np.argmax(row)) if row.size else 0
        self._say(f"feature {r.feature}: peak {float(row[peak]) if row.size else 0:.3g} at {peak}"
                  + (f" {labels[peak]!r}" if peak < len(labels) else "")
                  + f"; fires at {int(np.count_nonzero(row > 0))} of {row.size} tokens; selected {q}")

    def _draw_row(self) -> None:
        row = self.shown_row()
        plot = self.row_plot.getPlotItem()
        for item in list(plot.listDataItems()):
            plot.removeItem(item)
        if row is None:
            return
        x = np.arange(row.size, dtype=np.float64)
        plot.plot(x, row.astype(np.float64), pen=MAIN_PEN, symbol="o" if row.size <= 200 else None, symbolSize=4)
        q = self.state.query_index
        self.cursor.setPos(q if q is not None else 0)
        st = self.state
        if self.isVisible() and st.trace is not None and row.size == st.trace.n_tokens:
            saes = st.saes
            label = saes.label(saes.sae, self.result.feature)
            st.set_token_overlay(np.maximum(row, 0.0), f"SAE {saes.sae} feature {self.result.feature}"
                                 + (f" ({label})" if label else "") + ": its activation at each token", owner=self)

    def _clear_overlay(self) -> None:
        self.state.set_token_overlay(None, owner=self)

    def _draw_effect(self) -> None:
        effect = self.result.effect
        tok = self.state.tokenizer()
        for table, ids, values in ((self.promoted, effect.promoted_ids, effect.promoted_values),
                                   (self.suppressed, effect.suppressed_ids, effect.suppressed_values)):
            table.setRowCount(len(ids))
            for r, (tid, v) in enumerate(zip(ids, values, strict=True)):
                table.setItem(r, 0, QtWidgets.QTableWidgetItem(token_label(int(tid), tok)))
                item = QtWidgets.QTableWidgetItem(f"{float(v):+.3g}")
                item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
                table.setItem(r, 1, item)

    def effect_rows(self) -> tuple[list[str], list[str]]:
        """The promoted and suppressed token labels as listed (tests read them)."""
        return ([self.promoted.item(r, 0).text() for r in range(self.promoted.rowCount())],
                [self.suppressed.item(r, 0).text() for r in range(self.suppressed.rowCount())])

    def _draw_overview(self) -> None:
        o = self.overview
        plot = self.l0_plot.getPlotItem()
        for item in list(plot.listDataItems()):
            plot.removeItem(item)
        if o is None:
            self.overview_text.setText("")
            return
        l0 = np.asarray(o.l0, dtype=np.float64)
        plot.plot(np.arange(l0.size, dtype=np.float64), l0, pen=MAIN_PEN, stepMode=None)
        sae = self.state.saes.selected()
        where = f"{sae.hook}, " if sae is not None else ""
        self.overview_text.setText(
            f"The layer through the SAE ({where}{o.l0.size} tokens): L0 {float(l0.mean()) if l0.size else 0:.1f} "
            f"features per token (lower plot); fraction of variance unexplained {float(o.fvu):.3f}; next-token KL "
            f"with the reconstruction spliced in {float(o.kl):.4f} nats (mean over tokens).")

    def _on_plot_click(self, event) -> None:
        if self.result is None:
            return
        point = self.row_plot.getPlotItem().getViewBox().mapSceneToView(event.scenePos())
        T = int(np.asarray(self.result.row).size)
        position = int(round(point.x()))
        if 0 <= position < T:
            self.state.set_selection(query=position)

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(800, 640)
