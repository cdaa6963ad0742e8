"""Head-importance scan: ablate each head in turn on the worker, show layers x heads.

Run asks the worker for a ScanRequest at the selected position, on top of the current mask and
ablation; the progress bar follows it and Cancel stops it within one layer's compute, keeping
the heads measured so far. Clicking a cell masks (or unmasks) that head. The heatmap shows the
effect on the metric (diverging, centred at zero; negative: the head helped), the KL divergence
or p(target); heads already masked are blank. Beside it, the RANKED heads that matter most (a
1,000-head model's grid is too fine to read cell by cell); clicking one selects that head.

A scan runs only when asked, so its result can outlive its prompt: once the prompt changes, a
strip over the grid says whose result it is (and Run scan scans the new one); an empty prompt
or another model clears it.
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.empty_state import EmptyState, StaleMark, quoted_prompt
from transformer_viewer.viewer.views.heatmap import HeatmapExport
from transformer_viewer.viewer.views.logits_panel import token_label
from transformer_viewer.viewer.views.parts import (
    AdaptiveSplitter,
    ExportButton,
    TextHeatmap,
    compact_table,
    head_labels,
    layer_labels,
    shrinkable_title,
)

RANKED = 20  # heads listed beside the grid
NO_SCAN = "press Run scan to ablate each head in turn at the selected position"
NO_PROMPT = "type a prompt, then press Run scan to ablate each head in turn"
FIELD_CHARS = 14  # the Target and minus fields show this many characters ("' Paris' or 1234")
SHOWN = {"effect": "effect on the metric", "kl": "KL(baseline ‖ ablated)", "prob": "p(target) when ablated"}


def scan_matrix(result, shown: str) -> tuple[np.ndarray, bool]:
    """(L, nh) matrix for `shown` and whether it is diverging."""
    if shown == "effect":
        return result.effect.astype(np.float32), True
    if shown == "kl":
        return result.kl.astype(np.float32), False
    if shown == "prob":
        return result.target_probs.astype(np.float32), False
    raise ValueError(f"unknown scan quantity {shown!r}; use one of {', '.join(SHOWN)}")


class ScanView(HeatmapExport, QtWidgets.QWidget):
    def __init__(self, state, worker=None, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.result = None
        self.handle = None  # the running scan's RequestHandle
        self._tokenizer = None
        self.heatmap = TextHeatmap()
        self.heatmap.hover_prefix = ""
        self.target_edit = QtWidgets.QLineEdit()
        self.target_edit.setPlaceholderText("top token")
        self.target_edit.setToolTip("Target: one token of the model's vocabulary as text (e.g. ' Paris', mind the space) or an id; "
                                    "empty: the baseline's top token")
        self.distractor_edit = QtWidgets.QLineEdit()
        self.distractor_edit.setPlaceholderText("none")
        self.distractor_edit.setToolTip("Optional distractor: the metric becomes logit(target) - logit(distractor), "
                                        "which equals log p(target) - log p(distractor)")
        for edit in (self.target_edit, self.distractor_edit):
            # wide enough to read a token and its quotes, or an id
            edit.setMinimumWidth(edit.fontMetrics().horizontalAdvance("x" * FIELD_CHARS) + 12)
            edit.setMaximumWidth(2 * edit.minimumWidth())
            edit.returnPressed.connect(self.run)
        self.shown_combo = QtWidgets.QComboBox()
        for key, text in SHOWN.items():
            self.shown_combo.addItem(text, key)
        self.shown_combo.currentIndexChanged.connect(self.refresh)
        self.run_button = QtWidgets.QPushButton("Run scan")
        self.run_button.setToolTip("Ablate every head in turn (on top of the current mask) at the selected position")
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QtWidgets.QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setMinimumWidth(60)
        self.progress.setMaximumWidth(180)
        self.export_button = ExportButton(self, "head_scan")
        self.info = QtWidgets.QLabel("Run a scan to see which heads this prediction depends on; click a cell to mask it.")
        self.info.setWordWrap(True)
        self.ranked = QtWidgets.QTableWidget(0, 4)
        self.ranked.setHorizontalHeaderLabels(["head", "effect", "KL", "p(target)"])
        compact_table(self.ranked)
        self.ranked.setToolTip("The heads whose ablation moves the metric most (largest drop first); click to select")
        self.ranked.cellClicked.connect(self._on_ranked_click)

        # Two rows, so that the fields keep their width in a middle column of 600 px.
        form = QtWidgets.QHBoxLayout()
        form.setContentsMargins(4, 2, 4, 0)
        form.addWidget(QtWidgets.QLabel("Target"))
        form.addWidget(self.target_edit)
        form.addWidget(QtWidgets.QLabel("minus"))
        form.addWidget(self.distractor_edit)
        form.addWidget(self.run_button)
        form.addWidget(self.cancel_button)
        form.addStretch(1)
        form.addWidget(self.export_button)
        shown = QtWidgets.QHBoxLayout()
        shown.setContentsMargins(4, 0, 4, 0)
        shown.addWidget(QtWidgets.QLabel("Show"))
        shown.addWidget(self.shown_combo)
        shown.addWidget(self.progress)
        shown.addStretch(1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(form)
        layout.addLayout(shown)
        layout.addWidget(self.info)
        body = AdaptiveSplitter(ratio=1.3)
        body.addWidget(self.heatmap)
        body.addWidget(self.ranked)
        body.setStretchFactor(0, 3)
        body.setStretchFactor(1, 1)
        body.setSizes([700, 290])  # room for the ranked table's four columns
        layout.addWidget(body, 1)
        self.cover = EmptyState(self.heatmap)  # no placeholder axes before the first scan
        self.cover.show_message(NO_SCAN)
        self.stale = StaleMark(self.heatmap)  # over a result of an earlier prompt
        self.result_prompt: str | None = None  # the prompt `result` was scanned on

        self.heatmap.cell_clicked.connect(self._on_cell_click)
        state.model_changed.connect(lambda _i: self.clear())
        state.prompt_changed.connect(self._on_prompt)

    # -- commands -------------------------------------------------------------------------
    def tokenizer(self):
        """The loaded model's tokenizer (one given to the view, as the CLI export does, wins)."""
        return self._tokenizer if self._tokenizer is not None else self.state.tokenizer()

    def parse_inputs(self, names: tuple[str, str] = ("target", "distractor")) -> tuple[int | None, int | None]:
        """(target, distractor) from the two fields; raises ModelError with one line that calls
        them by `names`."""
        from transformer_viewer.model.tokenizers.tokenizer import parse_token

        info = self.state.model_info
        n_vocab = min(info.vocab_size or 50257, self.tokenizer().n_vocab) if info else self.tokenizer().n_vocab
        target = self.target_edit.text() or None
        distractor = self.distractor_edit.text() or None
        return (parse_token(target, self.tokenizer(), n_vocab, names[0]),
                parse_token(distractor, self.tokenizer(), n_vocab, names[1]))

    def run(self) -> None:
        """The Run button: a bad target shows in the view."""
        from transformer_viewer.model.errors import ModelError

        try:
            self.start()
        except ModelError as e:
            self.info.setText(f"<span style='color:#b00'>{e}</span>")

    def start(self, names: tuple[str, str] = ("target", "distractor")) -> None:
        """Ask the worker for a scan of the fields' target at the selected position; a bad
        target raises ModelError."""
        from transformer_viewer.viewer.worker.scan import ScanRequest

        st = self.state
        if self.worker is None or st.trace is None or not st.prompt:
            self.info.setText("Run a prompt first.")
            return
        target, distractor = self.parse_inputs(names)
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        total = int((~st.mask).sum())
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(0)
        self.progress.setFormat(f"0 / {total} heads")
        self.info.setText(f"scanning {total} heads at position {st.query_index} ({st.trace.labels[st.query_index]!r})…")
        if self.result is None:
            self.cover.show_message(f"scanning {total} heads\u2026")
        request = ScanRequest(text=st.prompt, target=target, distractor=distractor, position=st.query_index,
                              intervention=st.intervention)
        self.handle = None
        handle = self.worker.submit(request, on_result=self._on_result, on_failure=self._on_failed,
                                    on_progress=self._on_progress)
        if not handle.done:  # an inline worker has answered already
            self.handle = handle

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.cancel_button.setEnabled(False)

    @property
    def running(self) -> bool:
        return self.handle is not None

    def clear(self) -> None:
        self.result = None
        self.result_prompt = None
        self.heatmap.set_data(np.zeros((0, 0)), (), ())
        self.ranked.setRowCount(0)
        self.stale.show_message(None)
        self.cover.show_message(NO_SCAN if (self.state.prompt or "").strip() else NO_PROMPT)

    def _on_prompt(self, text: str) -> None:
        """A new prompt: an empty one clears the scan; another one marks it stale."""
        if not (text or "").strip():
            if self.handle is not None:
                self.cancel()
            self.clear()
            self.info.setText("Type a prompt, then run a scan to see which heads its prediction depends on.")
            return
        if self.result is None:
            self.cover.show_message(NO_SCAN)
        self._mark_stale()

    def is_stale(self) -> bool:
        """Whether the result shown was scanned on another prompt than the current one."""
        return self.result is not None and self.result_prompt is not None and self.result_prompt != self.state.prompt

    def _mark_stale(self) -> None:
        if not self.is_stale():
            self.stale.show_message(None)
            return
        self.stale.show_message(f"scanned on the previous prompt {quoted_prompt(self.result_prompt)}: "
                                "press Run scan to scan this one")

    # -- the scan's answers -----------------------------------------------------------------
    def _on_progress(self, p) -> None:
        if p.total:
            self.progress.setRange(0, int(p.total))
            self.progress.setValue(int(p.done))
            self.progress.setFormat(f"{int(p.done)} / {int(p.total)} heads")

    def _on_result(self, answer) -> None:
        self._finish()
        if not (self.state.prompt or "").strip():
            return  # the prompt was cleared while the scan ran
        self.result_prompt = answer.request.text
        self.set_result(answer.value)

    def _on_failed(self, failure) -> None:
        self._finish()
        self.info.setText("scan cancelled" if failure.cancelled else f"<span style='color:#b00'>{failure.message}</span>")
        if self.result is None:
            self.cover.show_message(("scan cancelled: " if failure.cancelled else "scan failed: ") + NO_SCAN)

    def _finish(self) -> None:
        self.handle = None
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def set_result(self, result) -> None:
        self.result = result
        self.refresh()
        self._mark_stale()

    # -- drawing --------------------------------------------------------------------------
    def _token(self, i: int | None) -> str:
        return "" if i is None else repr(token_label(i, self.tokenizer()))

    def refresh(self, *_args) -> None:
        r = self.result
        if r is None:
            return
        self.cover.show_message(None)
        shown = self.shown_combo.currentData()
        m, diverging = scan_matrix(r, shown)
        L, nh = m.shape
        levels = (0.0, 1.0) if shown == "prob" else None
        self.heatmap.set_data(m, layer_labels(L), head_labels(nh), levels=levels, diverging=diverging,
                              colormap=None if diverging else "viridis",
                              title=f"{SHOWN[shown]} when each head is ablated ({r.ablation})",
                              row_name="layer", col_name="head")
        texts = [["masked" if r.base_mask[la, h] else ("" if not r.done[la, h] else f"{m[la, h]:+.3f}" if diverging
                  else f"{m[la, h]:.3g}") for h in range(nh)] for la in range(L)]
        lo, hi = self.heatmap.levels()
        # Black text on light cells: the middle of the diverging map, the bright end of viridis;
        # white on the dark ones and on blank (NaN) cells, which show the black background.
        filled = np.nan_to_num(m, nan=0.0)
        if diverging:
            dark = np.abs(filled) < 0.7 * max(abs(lo), abs(hi))
        else:
            dark = filled > lo + 0.55 * (hi - lo)
        dark &= ~np.isnan(m)
        self.heatmap.set_cell_text(texts, dark)
        shrinkable_title(self.heatmap.plot)
        metric = (f"log p({self._token(r.target_id)})" if r.distractor_id is None
                  else f"logit({self._token(r.target_id)}) − logit({self._token(r.distractor_id)})")
        state = f"cancelled after {r.n_done} of {r.n_done + int((~r.done & ~r.base_mask).sum())} heads" \
            if r.cancelled else f"{r.n_done} heads"
        best = r.ranked("effect")[:1]
        top = f"; biggest drop: L{best[0][0]}H{best[0][1]} ({r.effect[best[0]]:+.3f})" if best else ""
        self.info.setText(f"position {r.position}: metric {metric}, baseline {r.baseline_metric:.3f}; {state}{top}. "
                          "Click a cell to mask that head.")
        self._fill_ranked(r)

    def _fill_ranked(self, r) -> None:
        heads = r.ranked("effect")[:RANKED]
        self.ranked.setRowCount(len(heads))
        for i, (layer, head) in enumerate(heads):
            cells = (f"L{layer}H{head}", f"{r.effect[layer, head]:+.4f}", f"{r.kl[layer, head]:.4g}",
                     f"{r.target_probs[layer, head]:.4g}")
            for j, text in enumerate(cells):
                item = QtWidgets.QTableWidgetItem(text)
                item.setData(QtCore.Qt.ItemDataRole.UserRole, (layer, head))
                self.ranked.setItem(i, j, item)
        self.ranked.resizeColumnsToContents()

    def ranked_heads(self) -> list[tuple[int, int]]:
        """(layer, head) of each row of the ranked table, as shown."""
        return [self.ranked.item(i, 0).data(QtCore.Qt.ItemDataRole.UserRole) for i in range(self.ranked.rowCount())]

    def _on_ranked_click(self, row: int, _col: int) -> None:
        item = self.ranked.item(row, 0)
        if item is not None:
            layer, head = item.data(QtCore.Qt.ItemDataRole.UserRole)
            self.state.set_selection(layer=layer, head=head)

    def _on_cell_click(self, row: int, col: int) -> None:
        st = self.state
        if st.model_info is not None and row < st.n_layer and col < st.n_head:
            st.toggle_head(row, col)

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(760, 420)
