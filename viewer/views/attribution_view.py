"""Head attribution: each head's direct effect on the logit of the predicted token at the
selected position, layers x heads on a diverging scale (red raises the logit, blue lowers it).

Computed on the worker (an AttributionRequest per trace or position) while the view is shown;
a click on a cell selects that head. A result of an earlier prompt stays drawn until the new one
arrives, under a strip that says so.
"""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.views.empty_state import EmptyState, StaleMark, quoted_prompt
from transformer_viewer.viewer.views.heatmap import HeatmapExport, HeatmapView
from transformer_viewer.viewer.views.logits_panel import token_label
from transformer_viewer.viewer.views.parts import ExportButton, bar_over, head_labels, layer_labels, view_bar


class AttributionView(HeatmapExport, QtWidgets.QWidget):
    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.result = None
        self._asked = None  # (trace, position) of the last request
        self.heatmap = HeatmapView()
        self.info = QtWidgets.QLabel("computing the head attribution\u2026")
        self.info.setWordWrap(True)
        self.export_button = ExportButton(self, "head_attribution")
        bar = view_bar(self.info, self.export_button)
        bar_over(self, bar, self.heatmap)
        self.cover = EmptyState(self.heatmap)  # no placeholder axes before the first result
        self.cover.show_message("computing the head attribution\u2026")
        self.stale = StaleMark(self.heatmap)  # over a result of an earlier prompt
        self.result_prompt: str | None = None  # the prompt `result` was computed on
        state.prompt_changed.connect(lambda _t: self._mark_stale())
        self.heatmap.cell_clicked.connect(lambda row, col: state.set_selection(layer=row, head=col))
        state.trace_changed.connect(self._on_trace)
        state.selection_changed.connect(self.request)  # the position follows the selected token

    def _on_trace(self, trace) -> None:
        if trace is None:  # another model or no prompt: the old result no longer applies
            self.result = None
            self._say("run a prompt to see each head's direct effect on the prediction")
        self.request()
        self._mark_stale()

    def is_stale(self) -> bool:
        """Whether the result drawn is of another prompt than the current one."""
        return self.result is not None and self.result_prompt is not None and self.result_prompt != self.state.prompt

    def _mark_stale(self) -> None:
        if not self.is_stale() or not (self.state.prompt or "").strip():
            self.stale.show_message(None)
            return
        self.stale.show_message(f"head attribution of the previous prompt {quoted_prompt(self.result_prompt)}; "
                                "computing this one\u2026")

    def _say(self, text: str) -> None:
        """`text` in the bar, and over the plot while it has no result to show."""
        self.info.setText(text)
        self.cover.show_message(text if self.result is None else None)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        self.request()

    def request(self) -> None:
        """Ask for the attribution of the shown trace at the selected position, once each."""
        from transformer_viewer.viewer.worker.attribution import AttributionRequest

        st = self.state
        asked = self._asked
        if st.trace is None or not self.isVisible() or (asked is not None and asked[0] is st.trace
                                                        and asked[1] == st.query_index):
            return
        self._asked = (st.trace, st.query_index)
        self._say("computing the head attribution\u2026")
        self.worker.submit(AttributionRequest(text=st.prompt, position=st.query_index, mask=st.trace.mask,
                                              ablation=st.trace.ablation),
                           on_result=lambda answer: self.set_result(answer.value, answer.request.text),
                           on_failure=self._on_failed)

    def _on_failed(self, failure) -> None:
        """Cancelled (or failed): say so; showing the view or selecting a token asks again."""
        self._asked = None
        stopped = "stopped" if failure.cancelled else failure.message
        self._say(f"head attribution {stopped}; select a token or show this tab again to compute it")

    def set_result(self, result, prompt: str | None = None) -> None:
        """Draw `result`, computed on `prompt` (None: the current one)."""
        self.result = result
        self.result_prompt = self.state.prompt if prompt is None else prompt
        L, nh = result.direct.shape
        self.heatmap.set_data(result.direct, layer_labels(L), head_labels(nh), levels=None, diverging=True,
                              title=f"direct effect on the logit of {token_label(result.token_id, self.state.tokenizer())!r} "
                                    f"at position {result.position}", row_name="layer", col_name="head")
        layer, head = np.unravel_index(int(np.argmax(np.abs(result.direct))), result.direct.shape)
        capped = " before the soft-cap" if result.logit_cap else ""
        self._say(f"logit {result.logit:.2f}{capped}; largest direct effect: L{layer}H{head} "
                  f"({result.direct[layer, head]:+.2f})")
        self._mark_stale()

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(640, 480)
