"""Direct logit attribution: every writer's direct effect on one token's logit (or a pair's
logit difference) at the selected position, read through the final norm with its scale frozen
at that position (model/analysis/logit_attribution.py).

- the heads, layers x heads on a diverging scale (red raises the logit, blue lowers it); a
  click on a cell selects that head in every view;
- one bar per layer for the attention's output bias and one for the MLP (and, under feature
  clamps, one for what each clamped layer's clamps added), beside the embedding, the
  positions, the final norm's bias and the unembedding's bias;
- the top contributors, sorted, with their share of the sum of magnitudes;
- the selected head's term split by the key position it read, over the tokens (the parts sum
  to the head's term).

The token (A) and the one subtracted (B) are typed (text that is one token, or an id) or picked
from the next-token panel's candidates; A left empty is the top predicted token. Computed on the
worker (an AttributionRequest per trace, position and tokens; a HeadSourcesRequest per head)
while the view is shown, from the cached run, masked or clamped or not. A result of an earlier prompt
stays drawn until the new one arrives, under a strip that says so.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.views.answers import same_request
from transformer_viewer.viewer.views.empty_state import EmptyState, StaleMark, quoted_prompt
from transformer_viewer.viewer.views.heatmap import HeatmapExport, HeatmapView
from transformer_viewer.viewer.views.logits_panel import token_label
from transformer_viewer.viewer.views.parts import (
    AdaptiveSplitter,
    ExportButton,
    bar_over,
    compact_table,
    depth_plot,
    head_labels,
    layer_labels,
    set_depth_ticks,
    view_bar,
)
from transformer_viewer.viewer.views.token_axis import short_label

TOP_ROWS = 12  # contributors listed
FROZEN_NOTE = ("Direct effects read through the final norm with its scale frozen at position {p} "
               "(and each post-sublayer norm's, where the model has one): with the scales fixed the "
               "terms add up to the logit{diff}{cap}.")
_UP, _DOWN = (200, 60, 50), (50, 90, 200)
_BIAS, _MLP, _CLAMP = (120, 170, 220), (240, 150, 40), (150, 90, 190)
BARS_TITLE = "other writers (blue: attention bias, orange: MLP{clamps})"


def term_name(t: dict) -> str:
    """A short name of one term of `LogitAttribution.terms()`."""
    c, layer, head = t["component"], t["layer"], t["head"]
    if c == "head":
        return f"L{layer}H{head}"
    if c == "attn_bias":
        return f"L{layer} attention bias"
    if c == "mlp":
        return f"L{layer} MLP"
    if c == "clamp":
        return f"clamps L{layer}"
    return {"embedding": "token embedding", "position": "positions", "norm_bias": "final norm bias",
            "unembed_bias": "unembedding bias"}[c]


def token_pair(a, b, tokenizer, n_vocab: int) -> tuple[int, ...]:
    """() for the top token, (A,) or (A, B) from `a` and `b`: each an id, text that is exactly
    one token, or None. Raises ModelError with one line for a bad one."""
    from transformer_viewer.model.tokenizers.tokenizer import parse_token

    first = parse_token(None if a is None else str(a), tokenizer, n_vocab, "token")
    second = parse_token(None if b is None else str(b), tokenizer, n_vocab, "minus token")
    if first is None and second is not None:
        raise ModelError("choose the token A as well: the difference is logit(A) - logit(B)")
    return () if first is None else ((first,) if second is None else (first, second))


class TokenChoice(QtWidgets.QComboBox):
    """An editable box: a token typed as text or id, or one of the next-token panel's candidates."""

    def __init__(self, placeholder: str, parent=None):
        super().__init__(parent)
        self.setEditable(True)
        self.setInsertPolicy(QtWidgets.QComboBox.InsertPolicy.NoInsert)
        self.lineEdit().setPlaceholderText(placeholder)
        self.setMinimumContentsLength(10)

    def set_candidates(self, items: list[tuple[str, int]]) -> None:
        text = self.currentText()
        self.blockSignals(True)
        self.clear()
        for label, token_id in items:
            self.addItem(label, token_id)
        self.setEditText(text)
        self.blockSignals(False)

    def show_token(self, spec, tokenizer) -> None:
        """Show `spec`: text as typed, an id by its candidate's label (or as the id itself)."""
        if spec is None or isinstance(spec, str):
            self.setEditText(spec or "")
            return
        label = token_label(int(spec), tokenizer)
        self.setEditText(label if self.findText(label) >= 0 else str(int(spec)))

    def spec(self) -> str | int | None:
        """The chosen token: an id picked from the list, the typed text, or None (empty)."""
        text = self.currentText()
        i = self.findText(text)
        if i >= 0 and text:
            return int(self.itemData(i))
        return text or None


class AttributionView(HeatmapExport, QtWidgets.QWidget):
    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.result = None
        self.sources: tuple | None = None  # (layer, head, (p + 1,) values) of the drawn result
        self.tokens: tuple[int, ...] = ()  # () the top token; (A,) or (A, B)
        self._asked = None  # (trace, position, tokens) of the last attribution asked for
        self._pending = None  # the AttributionRequest whose answer is wanted
        self._pending_sources = None  # the HeadSourcesRequest whose answer is wanted
        self.dropped = 0  # answers to requests no longer wanted
        self.heatmap = HeatmapView()
        self.info = QtWidgets.QLabel("computing the logit attribution\u2026")
        self.info.setWordWrap(True)
        self.token_a = TokenChoice("top token")
        self.token_b = TokenChoice("minus (optional)")
        self.token_a.setToolTip("The token whose logit is split: one token of the vocabulary as text (often with "
                                "its leading space) or an id, or one of the next-token panel's candidates; "
                                "empty: the top predicted token")
        self.token_b.setToolTip("Optional: split the logit difference A - B instead")
        for box in (self.token_a, self.token_b):
            box.activated.connect(lambda _i: self.apply_tokens())
            box.lineEdit().returnPressed.connect(self.apply_tokens)
        self.export_button = ExportButton(self, "logit_attribution")
        bar = view_bar(self.info, self.export_button, QtWidgets.QLabel("Token"), self.token_a,
                       QtWidgets.QLabel("\u2212"), self.token_b)

        self.bars = depth_plot(BARS_TITLE.format(clamps=""), left="direct effect")
        self.bar_items: list[pg.BarGraphItem] = []
        self.table = QtWidgets.QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["contributor", "effect", "share"])
        compact_table(self.table)
        self.table.itemSelectionChanged.connect(self._on_table_pick)
        self.sources_plot = depth_plot("select a head to see which tokens it moved the answer from",
                                       left="direct effect", bottom="key position")
        self.note = QtWidgets.QLabel("")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #555")

        left = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        left.addWidget(self.heatmap)
        left.addWidget(self.bars)
        left.setSizes([300, 160])
        right = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        right.addWidget(self.table)
        right.addWidget(self.sources_plot)
        right.setSizes([290, 420])
        self.body = AdaptiveSplitter(ratio=1.6, inner=right)
        self.body.addWidget(left)
        self.body.addWidget(right)
        self.body.setSizes([500, 300])
        self.page = page = QtWidgets.QWidget()
        page_layout = QtWidgets.QVBoxLayout(page)
        page_layout.setContentsMargins(0, 0, 0, 0)
        page_layout.addWidget(self.body, 1)
        page_layout.addWidget(self.note)
        bar_over(self, bar, page)
        self.cover = EmptyState(self.heatmap)  # no placeholder axes before the first result
        self.cover.show_message("computing the logit attribution\u2026")
        self.stale = StaleMark(self.heatmap)  # over a result of an earlier prompt
        self.result_prompt: str | None = None  # the prompt `result` was computed on
        self.result_intervention = None  # the Intervention `result` was computed under
        state.prompt_changed.connect(lambda _t: self._mark_stale())
        self.heatmap.cell_clicked.connect(lambda row, col: state.set_selection(layer=row, head=col))
        state.trace_changed.connect(self._on_trace)
        state.model_changed.connect(lambda _i: self._forget_tokens())
        state.selection_changed.connect(self.request)  # the position follows the selected token, the split the head
        if state.trace is not None:  # built after the run (the export command)
            self._fill_candidates(state.trace)

    # -- tokens ---------------------------------------------------------------------------
    def _forget_tokens(self) -> None:
        self.tokens = ()
        for box in (self.token_a, self.token_b):
            box.setEditText("")

    def _fill_candidates(self, trace) -> None:
        tok = self.state.tokenizer()
        items = [(token_label(int(i), tok), int(i)) for i in trace.next.top_ids[:20]]
        for box in (self.token_a, self.token_b):
            box.set_candidates(items)

    def set_tokens(self, a=None, b=None) -> None:
        """Split the logit of `a` (minus `b`'s): each a token id, text that is one token, or
        None (`a` None: the top token). Raises ModelError for a bad token."""
        tok = self.state.tokenizer()
        info = self.state.model_info
        n_vocab = min(info.vocab_size or tok.n_vocab, tok.n_vocab) if info else tok.n_vocab
        tokens = token_pair(a, b, tok, n_vocab)
        for box, spec in ((self.token_a, a), (self.token_b, b)):  # the boxes say what is split
            box.show_token(spec, tok)
        if tokens != self.tokens:
            self.tokens = tokens
            self._asked = None
            self.request()

    def apply_tokens(self) -> None:
        """The boxes' tokens; a bad one is said in the view's line."""
        try:
            self.set_tokens(self.token_a.spec(), self.token_b.spec())
        except ModelError as e:
            self.info.setText(f"<span style='color:#b00'>{e}</span>")

    # -- requests -------------------------------------------------------------------------
    def _on_trace(self, trace) -> None:
        if trace is None:  # another model or no prompt: the old result no longer applies
            self.result = None
            self.sources = None
            self._say("run a prompt to see each writer's direct effect on the prediction")
        else:
            self._fill_candidates(trace)
        self.request()
        self._mark_stale()

    def is_stale(self) -> bool:
        """Whether the result drawn is of another prompt than the current one."""
        return self.result is not None and self.result_prompt is not None and self.result_prompt != self.state.prompt

    def _mark_stale(self) -> None:
        if not self.is_stale() or not (self.state.prompt or "").strip():
            self.stale.show_message(None)
            return
        self.stale.show_message(f"logit attribution of the previous prompt {quoted_prompt(self.result_prompt)}; "
                                "computing this one\u2026")

    def _say(self, text: str) -> None:
        """`text` in the bar, and over the plot while it has no result to show."""
        self.info.setText(text)
        self.cover.show_message(text if self.result is None else None)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        self.request()

    def request(self) -> None:
        """Ask for the attribution of the shown trace at the selected position, once each; then
        the selected head's split by source position."""
        from transformer_viewer.viewer.worker.attribution import AttributionRequest

        st = self.state
        if st.trace is None or not self.isVisible():
            return
        # The run, not the Trace object: the log-probabilities' second pass over the same run
        # installs a new Trace of it, which changes nothing this view computes.
        want = (st.trace.run_id, st.query_index, self.tokens)
        if self._asked == want:
            self.request_sources()
            return
        self._asked = want
        self._say("computing the logit attribution\u2026")
        request = AttributionRequest(text=st.prompt, position=st.query_index, tokens=self.tokens,
                                     intervention=st.trace.intervention)
        self._pending = request
        self.worker.submit(request, on_result=self._on_result, on_failure=self._on_failed)

    def _on_result(self, answer) -> None:
        if not same_request(answer.request, self._pending):
            self.dropped += 1  # superseded while it was computed
            return
        self._pending = None
        self.set_result(answer.value, answer.request.text, answer.request.intervention)

    def _on_failed(self, failure) -> None:
        """Cancelled (or failed): say so; showing the view or selecting a token asks again."""
        self._asked = None
        self._pending = None
        stopped = "stopped" if failure.cancelled else failure.message
        self._say(f"logit attribution {stopped}; select a token or show this tab again to compute it")

    def request_sources(self) -> None:
        """Ask for the selected head's term split by source position (for the drawn result)."""
        from transformer_viewer.viewer.worker.attribution import HeadSourcesRequest

        st, r = self.state, self.result
        if r is None or st.trace is None or self.is_stale() or self._pending is not None:
            return
        layer, head = st.layer, st.head
        if not (0 <= layer < r.heads.shape[0] and 0 <= head < r.heads.shape[1]):
            return
        if self.sources is not None and self.sources[:2] == (layer, head):
            return
        p = self._pending_sources
        if p is not None and (p.layer, p.head, p.position, p.tokens) == (layer, head, r.position, r.tokens):
            return
        request = HeadSourcesRequest(text=st.prompt, layer=layer, head=head, position=r.position, tokens=r.tokens,
                                     intervention=self.result_intervention)
        self._pending_sources = request
        self.sources_plot.getPlotItem().setTitle(f"L{layer}H{head}: computing its split by source position\u2026",
                                                 size="9pt")
        self.worker.submit(request, on_result=self._on_sources, on_failure=lambda _f: self._forget_sources())

    def _forget_sources(self) -> None:
        self._pending_sources = None

    def _on_sources(self, answer) -> None:
        req, r = answer.request, self.result
        if (not same_request(req, self._pending_sources) or r is None or req.position != r.position
                or req.tokens != r.tokens):
            self.dropped += 1
            return
        self._pending_sources = None
        self.set_sources(req.layer, req.head, answer.value)

    # -- drawing --------------------------------------------------------------------------
    def set_result(self, result, prompt: str | None = None, intervention=None) -> None:
        """Draw `result` (a LogitAttribution), computed on `prompt` under `intervention` (None:
        the current prompt, the current trace's intervention)."""
        self.result = result
        self.result_prompt = self.state.prompt if prompt is None else prompt
        trace = self.state.trace
        self.result_intervention = intervention if intervention is not None or trace is None else trace.intervention
        self.sources = None
        tok = self.state.tokenizer()
        names = [token_label(t, tok) for t in result.tokens]
        what = f"the logit of {names[0]!r}" if len(names) == 1 else f"logit({names[0]!r}) \u2212 logit({names[1]!r})"
        L, nh = result.heads.shape
        self.heatmap.set_data(result.heads, layer_labels(L), head_labels(nh), levels=None, diverging=True,
                              title=f"heads' direct effect on {what} at position {result.position}",
                              row_name="layer", col_name="head")
        self._draw_bars(result)
        self._fill_table(result)
        capped = " before the soft-cap" if result.logit_cap else ""
        top = result.top(1)[0]
        self._say(f"{what}: {result.logit:.3f}{capped} = the sum of the terms ({result.total():.3f}); "
                  f"largest: {term_name(top)} ({top['value']:+.3f})")
        self.note.setText(FROZEN_NOTE.format(p=result.position, diff=" difference" if len(names) == 2 else "",
                                             cap=" before the final soft-cap" if result.logit_cap else ""))
        self.sources_plot.clear()
        self._mark_stale()
        self.request_sources()

    def _draw_bars(self, r) -> None:
        plot = self.bars.getPlotItem()
        plot.clear()
        labels, values, colours = ["embed"], [r.embedding], [(90, 90, 90)]
        if r.position_term is not None:
            labels.append("pos")
            values.append(r.position_term)
            colours.append((90, 90, 90))
        start = len(labels)
        L = r.mlp.shape[0]
        labels += [f"L{layer}" for layer in range(L)] + ["norm b", "unemb b"]
        x = np.arange(len(labels), dtype=float)
        other = np.array(values + [0.0] * L + [r.norm_bias, r.unembed_bias])
        other_x = np.r_[x[:start], x[start + L:]]
        other_v = np.r_[other[:start], other[start + L:]]
        layers = x[start:start + L]
        per_layer = [(r.attn_bias, _BIAS), (r.mlp, _MLP)]
        if r.clamped:  # a third bar in each layer: what its clamps added (0 in a layer without clamps)
            per_layer.append((r.clamp, _CLAMP))
        width = 0.68 / len(per_layer)  # the bars of a layer side by side, a small gap between them
        offsets = (np.arange(len(per_layer)) - (len(per_layer) - 1) / 2) * (width + 0.02)
        items = [pg.BarGraphItem(x=other_x, height=other_v, width=0.6, brush=(110, 110, 110))]
        items += [pg.BarGraphItem(x=layers + dx, height=v, width=width, brush=colour)
                  for dx, (v, colour) in zip(offsets, per_layer, strict=True)]
        for item in items:
            plot.addItem(item)
        self.bar_items = items
        plot.setTitle(BARS_TITLE.format(clamps=", purple: feature clamps" if r.clamped else ""), size="9pt")
        lo = float(min(0.0, other.min(), *(v.min() for v, _c in per_layer)))
        hi = float(max(0.0, other.max(), *(v.max() for v, _c in per_layer)))
        set_depth_ticks(self.bars, labels)
        plot.setYRange(lo, hi, padding=0.05)

    def _fill_table(self, r) -> None:
        top = r.top(TOP_ROWS)
        self.table.blockSignals(True)
        self.table.setRowCount(len(top))
        for i, t in enumerate(top):
            cells = (term_name(t), f"{t['value']:+.4f}", f"{100 * t['share']:.1f}%")
            for j, text in enumerate(cells):
                item = QtWidgets.QTableWidgetItem(text)
                item.setData(QtCore.Qt.ItemDataRole.UserRole, (t["component"], t["layer"], t["head"]))
                self.table.setItem(i, j, item)
        self.table.blockSignals(False)
        self.table.resizeColumnsToContents()

    def top_rows(self) -> list[tuple[str, str, str]]:
        """The contributors' table as shown: (name, effect, share) per row."""
        return [tuple(self.table.item(i, j).text() for j in range(3)) for i in range(self.table.rowCount())]

    def _on_table_pick(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return
        component, layer, head = self.table.item(rows[0].row(), 0).data(QtCore.Qt.ItemDataRole.UserRole)
        if component == "head":
            self.state.set_selection(layer=layer, head=head)
        elif layer is not None:
            self.state.set_selection(layer=layer)

    def set_sources(self, layer: int, head: int, values: np.ndarray) -> None:
        """Draw head (layer, head)'s term split by the key position it read."""
        self.sources = (int(layer), int(head), np.asarray(values, dtype=np.float32))
        plot = self.sources_plot.getPlotItem()
        plot.clear()
        v = self.sources[2]
        x = np.arange(v.shape[0], dtype=float)
        brushes = [pg.mkBrush(*(_UP if val >= 0 else _DOWN)) for val in v]
        plot.addItem(pg.BarGraphItem(x=x, height=v, width=0.8, brushes=brushes))
        trace = self.state.trace
        labels = trace.labels if trace is not None and len(trace.labels) >= len(v) else [str(i) for i in range(len(v))]
        set_depth_ticks(self.sources_plot, [short_label(lab, 8) for lab in labels[:len(v)]])
        term = float(self.result.heads[layer, head]) if self.result is not None else float(v.sum())
        plot.setTitle(f"L{layer}H{head}: {term:+.3f} split by the token it read (sums to it)", size="9pt")

    def export_target(self):
        """PNG/SVG/PDF render every part: heads, bars, contributors, the chosen head's split and
        the note on the frozen norm (.npy/.csv write the heads' matrix)."""
        return self.page

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(900, 600)
