"""The selected token's top SAE features, beside the next-token panel: id, activation (a bar) and
label, for the SAE chosen in its box; the BOS token's features left out unless asked for.

The panel asks the worker once per run and SAE for every token's top features
(`TokenFeaturesRequest`: (T, k) ids and activations, O(T k) memory at any prompt length), so
selecting another token redraws from what it has. Clicking a feature selects it for the
feature view (double-click brings that view up); the clamp controls under the list clamp it,
and the clamps in force are listed with a Remove button, like the head mask.
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.answers import same_request
from transformer_viewer.viewer.views.clamp_controls import ClampControls, ClampList
from transformer_viewer.viewer.views.logits_panel import BAR_ROLE, BarDelegate
from transformer_viewer.viewer.views.parts import compact_table

NO_SAE = "No SAE open: File > Open SAE\u2026 reads an SAELens folder, a params.npz or a cached SAE."


class FeaturesPanel(QtWidgets.QWidget):
    """`open_bundled` asks the window for the bundled SAE; `feature_activated(int)` (a
    double-click) asks it to show the feature view."""

    open_bundled = QtCore.Signal()
    feature_activated = QtCore.Signal(int)
    COLUMNS = ("feature", "activation", "label")

    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.result = None  # TokenFeatures of `_key`
        self._key = None  # (run_id, SAE index, BOS shown) the result is for
        self._pending = None
        self._offer_bundled = False
        self.sae_box = QtWidgets.QComboBox()
        self.sae_box.setToolTip("The SAE whose features are listed (File > Open SAE\u2026 adds one)")
        self.sae_box.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.sae_box.setMinimumContentsLength(12)
        self.view_button = QtWidgets.QToolButton()
        self.view_button.setText("Plot")
        self.view_button.setToolTip("Show the selected feature across the prompt, its effect on the logits and the "
                                    "layer's overview (the SAE feature view; a double-click on a feature does too)")
        self.view_button.clicked.connect(lambda: self.feature_activated.emit(self.state.saes.feature or 0))
        self.bos_box = QtWidgets.QCheckBox("BOS")
        self.bos_box.setToolTip("List the BOS token's features too (left out by default: they dwarf the rest)")
        self.warnings = QtWidgets.QLabel()  # the selected SAE's warnings, from its loading
        self.warnings.setWordWrap(True)
        self.warnings.setStyleSheet("color: #8a5a00;")
        self.warnings.hide()
        self.header = QtWidgets.QLabel(NO_SAE)
        self.header.setWordWrap(True)
        self.bundled_button = QtWidgets.QPushButton("Open the bundled SAE")
        self.bundled_button.setToolTip("Attach the SAE that ships with the bundled model")
        self.bundled_button.hide()
        self.table = QtWidgets.QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        compact_table(self.table)
        self.table.setItemDelegateForColumn(1, BarDelegate(self.table))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        self.clamp_controls = ClampControls(state, rows=2)
        self.clamp_list = ClampList(state)
        top = QtWidgets.QHBoxLayout()
        top.addWidget(self.sae_box, 1)
        top.addWidget(self.bos_box)
        top.addWidget(self.view_button)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.setSpacing(3)
        lay.addLayout(top)
        lay.addWidget(self.warnings)
        lay.addWidget(self.header)
        lay.addWidget(self.bundled_button)
        lay.addWidget(self.table, 1)
        lay.addWidget(self.clamp_controls)
        lay.addWidget(self.clamp_list)
        saes = state.saes
        self.sae_box.currentIndexChanged.connect(self._on_sae_chosen)
        self.bos_box.toggled.connect(saes.set_show_bos)
        self.bundled_button.clicked.connect(self.open_bundled.emit)
        self.table.itemSelectionChanged.connect(self._on_row_selected)
        self.table.cellDoubleClicked.connect(lambda row, _c: self._activate(row))
        saes.saes_changed.connect(self._on_saes)
        saes.feature_changed.connect(self._on_feature)
        saes.labels_changed.connect(lambda _i: self.redraw())
        saes.bos_changed.connect(self._on_bos)
        state.trace_changed.connect(lambda _t: self.request())
        state.selection_changed.connect(self.redraw)
        state.model_changed.connect(lambda _i: self._on_saes())
        self._on_saes()

    # -- what is listed -------------------------------------------------------------------
    def set_bundled_offer(self, offered: bool) -> None:
        """Show the "Open the bundled SAE" button while no SAE is open (the window decides)."""
        self._offer_bundled = offered
        self.bundled_button.setVisible(offered and not self.state.saes.attached)

    def _on_saes(self) -> None:
        saes = self.state.saes
        self.sae_box.blockSignals(True)
        self.sae_box.clear()
        for s in saes.attached:
            self.sae_box.addItem(s.title, s.index)
            self.sae_box.setItemData(self.sae_box.count() - 1, s.info, QtCore.Qt.ItemDataRole.ToolTipRole)
        if saes.sae is not None:
            self.sae_box.setCurrentIndex(max(0, self.sae_box.findData(saes.sae)))
        self.sae_box.blockSignals(False)
        self.sae_box.setEnabled(bool(saes.attached))
        self.view_button.setEnabled(bool(saes.attached))
        self._show_warnings()
        self.result, self._key = None, None
        self.request()

    def _on_sae_chosen(self, _row: int) -> None:
        index = self.sae_box.currentData()
        if index is not None and index != self.state.saes.sae:
            self.state.saes.select(int(index), None)

    def _show_warnings(self) -> None:
        sae = self.state.saes.selected()
        self.warnings.setText("\n".join(sae.warnings) if sae is not None else "")
        self.warnings.setVisible(sae is not None and bool(sae.warnings))
        self.sae_box.setToolTip(sae.info if sae is not None else "The SAE whose features are listed "
                                "(File > Open SAE\u2026 adds one)")

    def _on_feature(self) -> None:
        saes = self.state.saes
        self._show_warnings()
        if saes.sae is not None and self.sae_box.currentData() != saes.sae:
            self.sae_box.blockSignals(True)
            self.sae_box.setCurrentIndex(max(0, self.sae_box.findData(saes.sae)))
            self.sae_box.blockSignals(False)
        if self.key() != self._key:
            self.request()  # another SAE
        else:
            self._mark_selected()

    def _on_bos(self, show: bool) -> None:
        if self.bos_box.isChecked() != show:
            self.bos_box.setChecked(show)
        self.request()

    # -- the worker -----------------------------------------------------------------------
    def key(self):
        st = self.state
        if st.trace is None or st.saes.sae is None:
            return None
        return st.trace.run_id, st.saes.sae, st.saes.show_bos

    def request(self) -> None:
        """Ask for every token's top features of the run drawn, unless they are here already."""
        from transformer_viewer.viewer.worker.sae import TokenFeaturesRequest

        st = self.state
        key = self.key()
        if key is None:
            self.result, self._key = None, None
            self.redraw()
            return
        if key == self._key and self.result is not None:
            self.redraw()
            return
        if not self.isVisible():
            return  # a closed dock asks nothing: it asks when shown
        request = TokenFeaturesRequest(text=st.prompt, sae_index=key[1], intervention=st.trace.intervention,
                                       skip_bos=not key[2])
        if same_request(request, self._pending):
            return
        self._pending = request
        self.header.setText("encoding the tokens' features\u2026")
        self.worker.submit(request, on_result=lambda a, k=key: self._on_result(a, k), on_failure=self._on_failed)

    def _on_result(self, answer, key) -> None:
        if not same_request(answer.request, self._pending):
            return
        self._pending = None
        if key != self.key():
            self.request()  # the run or SAE moved on meanwhile
            return
        self.result, self._key = answer.value, key
        self.redraw()

    def _on_failed(self, failure) -> None:
        self._pending = None
        self.header.setText("features stopped" if failure.cancelled else failure.message)

    # -- drawing --------------------------------------------------------------------------
    def rows(self) -> list[tuple[int, float]]:
        """(feature, activation) of the selected token as listed, highest first: the firing
        ones of its top features (none at a BOS token left out: model/analysis/sae_features.py)."""
        st = self.state
        q = st.query_index
        if self.result is None or q is None or q >= self.result.ids.shape[0]:
            return []
        ids, acts = np.asarray(self.result.ids[q]), np.asarray(self.result.acts[q])
        order = np.argsort(-acts, kind="stable")
        return [(int(ids[i]), float(acts[i])) for i in order if acts[i] > 0 and ids[i] >= 0]

    def redraw(self) -> None:
        st, saes = self.state, self.state.saes
        self.bundled_button.setVisible(self._offer_bundled and not saes.attached)
        if not saes.attached:
            self.header.setText(NO_SAE)
            self.table.setRowCount(0)
            return
        if st.trace is None:
            self.header.setText("Run a prompt to see its features.")
            self.table.setRowCount(0)
            return
        if self.result is None:
            self.table.setRowCount(0)
            if self._pending is None:
                self.header.setText("Choose an SAE above to list its features.")
            return
        q = st.query_index
        label = st.trace.labels[q] if q is not None and q < st.trace.n_tokens else "?"
        rows = self.rows()
        if q == 0 and self.result.bos_left_out:
            self.header.setText(f"Position {q} {label!r} is the BOS token, left out (tick BOS to list it).")
        else:
            firing = f"{len(rows)} firing among its top {self.result.ids.shape[1]}" if rows else "no feature fires"
            past = f" Note: {self.result.warning}." if self.result.warning else ""
            self.header.setText(f"Features at position {q} {label!r}: {firing}.{past}")
        top = max((a for _f, a in rows), default=1.0) or 1.0
        self.table.blockSignals(True)
        self.table.setRowCount(len(rows))
        for r, (feature, act) in enumerate(rows):
            id_item = QtWidgets.QTableWidgetItem(str(feature))
            id_item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
            id_item.setData(QtCore.Qt.ItemDataRole.UserRole, feature)
            act_item = QtWidgets.QTableWidgetItem(f"{act:.3g}")
            act_item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
            act_item.setData(BAR_ROLE, act / top)
            text = saes.label(saes.sae, feature)
            label_item = QtWidgets.QTableWidgetItem(text)
            label_item.setToolTip(text)
            for c, item in enumerate((id_item, act_item, label_item)):
                self.table.setItem(r, c, item)
        self.table.blockSignals(False)
        self._mark_selected()

    def _mark_selected(self) -> None:
        feature = self.state.saes.feature
        self.table.blockSignals(True)
        self.table.clearSelection()
        for r in range(self.table.rowCount()):
            if self.table.item(r, 0).data(QtCore.Qt.ItemDataRole.UserRole) == feature:
                self.table.selectRow(r)
                break
        self.table.blockSignals(False)

    def _on_row_selected(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows:
            self.state.saes.set_feature(self.table.item(rows[0].row(), 0).data(QtCore.Qt.ItemDataRole.UserRole))

    def _activate(self, row: int) -> None:
        feature = self.table.item(row, 0).data(QtCore.Qt.ItemDataRole.UserRole)
        self.state.saes.set_feature(feature)
        self.feature_activated.emit(int(feature))

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        self.request()

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(340, 250)
