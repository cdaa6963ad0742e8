"""The tokenized prompt as chips: one per token, wrapped into lines, coloured by a quantity.

The chips are one painted widget in a scroll area (viewer/views/chip_canvas.py), so 8k tokens
stay fast. Clicking a chip selects it as the query position; hovering shows id, position and
probability. The attention colouring is the query's row of the selected head: from the trace
when it holds that row exactly (its full patterns, or an overview that is the pattern), else
asked of the worker as a one-row tile.
"""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from transformer_viewer.viewer.views.chip_canvas import BASE_RGB, GAP, ChipCanvas, mix
from transformer_viewer.viewer.views.parts import run_name
from transformer_viewer.viewer.views.shown_refresh import RefreshWhenShown, when_shown
from transformer_viewer.viewer.worker.patterns import PatternRowRequest, tile_source

MODES = {"none": "nothing", "attention": "attention from the query", "surprisal": "surprisal", "neuron": "MLP neuron"}
_ACCENT = {"attention": (255, 140, 0), "surprisal": (220, 60, 60)}
_NEG, _POS = (60, 110, 220), (40, 160, 80)
_OVERLAY = (150, 70, 200)  # a view's own colouring (routes, rollout)
_WHITE = (255, 255, 255)
STOPPED = "surprisal: stopped; press Ctrl+Enter in the prompt to compute it"


def attention_row(trace, layer: int, head: int, query: int) -> np.ndarray | None:
    """(T,) float32 attention of `query` in head (layer, head) when the trace holds it exactly."""
    if trace.attention is not None:
        return trace.attention[layer, head, query].astype(np.float32)
    if trace.overview_cell == 1:  # the overview is the pattern itself
        return trace.overview_max[layer, head, query].astype(np.float32)
    return None


def chip_values(state, mode: str, row=None, stopped: bool = False) -> tuple[np.ndarray | None, str]:
    """The per-token values a colour mode shows, and a one-line legend (None: no colouring).
    `row`: the query's attention over keys 0..q, fetched when the trace does not hold it;
    `stopped`: the user cancelled the pass that computes the trace's log-probabilities."""
    trace = state.trace
    if trace is None or mode == "none":
        return None, ""
    L, h, q = state.layer, state.head, state.query_index
    n_layer, n_head = trace.mask.shape
    if not (0 <= L < n_layer and 0 <= h < n_head and 0 <= q < trace.n_tokens):
        # The selection already belongs to a newly loaded model whose first trace is on its way.
        return None, ""
    if mode == "attention":
        held = attention_row(trace, L, h, q)
        if held is None and row is None:
            return None, f"attention from {trace.labels[q]!r} ({q}) in L{L}H{h}: computing the row…"
        values = np.full(trace.n_tokens, np.nan, dtype=np.float32)
        values[:q + 1] = (held if held is not None else np.asarray(row, dtype=np.float32))[:q + 1]  # keys <= q
        return values, f"attention from {trace.labels[q]!r} ({q}) in L{L}H{h}; max {np.nanmax(values):.3g}"
    if mode == "surprisal":
        if trace.token_logprobs is None:
            return None, STOPPED if stopped else "surprisal: computing the intervened model's log-probabilities…"
        values = -trace.token_logprobs.astype(np.float32)  # (T,), NaN at t = 0
        finite = values[np.isfinite(values)]
        return values, f"surprisal -log p(token), 0 to {finite.max() if finite.size else 0:.2f} nats"
    if mode == "neuron":
        n = state.neuron
        if n is None or n >= trace.mlp_max.shape[1]:
            return None, "select an MLP neuron to colour by it"
        acts = state.layer_activations(trace, L)  # (T, n_mlp); the MLP view fetches what a trace did not keep
        if acts is None:
            return None, f"neuron {n} of layer {L}: computing the layer's activations…"
        values = acts[:, n].astype(np.float32)  # (T,)
        return values, f"neuron {n} of layer {L}: {values.min():.3f} to {values.max():.3f}"
    raise ValueError(f"unknown colour mode {mode!r}")


class TokenStrip(RefreshWhenShown, QWidget):
    """Chips for the current trace, linked to a ViewerState; `worker` answers the attention row
    of a long prompt. In a closed dock it waits: the layout of 16k chips and their colours are
    made when it is next shown."""

    def __init__(self, state, worker=None, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.worker = worker
        self._row: tuple | None = None  # (source, query, row) fetched from the worker
        self._asked: tuple | None = None  # (source, query) on its way
        self.mode = "attention"
        self.combo = QComboBox()
        for key, text in MODES.items():
            self.combo.addItem(text, key)
        self.combo.setCurrentIndex(list(MODES).index(self.mode))
        self.combo.currentIndexChanged.connect(lambda _i: self.set_mode(self.combo.currentData()))
        self.legend = QLabel()
        self.legend.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.canvas = ChipCanvas()
        self.canvas.tooltip_for = self.tooltip_text
        self.canvas.token_clicked.connect(lambda i: state.set_selection(query=i))
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.scroll.setWidget(self.canvas)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(QLabel("Colour tokens by"))
        top.addWidget(self.combo)
        top.addWidget(self.legend, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.scroll, 1)
        state.trace_changed.connect(lambda _trace: self.refresh())
        state.selection_changed.connect(self.refresh)
        state.neuron_changed.connect(self._on_neuron)
        state.token_overlay_changed.connect(self.refresh)
        state.activations_changed.connect(lambda _layer: self.refresh() if self.mode == "neuron" else None)
        state.patching_changed.connect(self.refresh)  # the tokens that differ from the corrupted prompt's
        self._labels: tuple = ((), ())  # (labels, special flags) the chips show
        self._stopped_run: int | None = None  # the trace whose log-probability pass the user cancelled
        if hasattr(worker, "failed"):  # the export command's inline worker has no signals
            worker.failed.connect(self._on_failure)
            worker.busy_changed.connect(self._on_busy)
        if state.trace is not None:
            self.refresh()

    def show_selected(self) -> None:
        """Scroll so the query's line is visible, snapped to whole lines (none cut at the top)."""
        i = self.canvas.selected
        if i is None or i >= len(self.canvas.rects):
            return
        r = self.canvas.rects[i]
        bar = self.scroll.verticalScrollBar()
        view_h = self.scroll.viewport().height()
        if bar.value() <= r.top() - GAP and r.bottom() + GAP <= bar.value() + view_h:
            return  # already in view
        line = r.height() + GAP
        above = max(0, min(1, (view_h // line) - 1))  # keep one line of context above when it fits
        bar.setValue(max(0, r.top() - GAP - above * line))

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown colour mode {mode!r}; use one of {', '.join(MODES)}")
        self.mode = mode
        if self.combo.currentData() != mode:
            self.combo.setCurrentIndex(list(MODES).index(mode))
        self.refresh()

    def _on_neuron(self, neuron) -> None:
        if neuron is not None:
            self.set_mode("neuron")
        else:
            self.refresh()

    @when_shown
    def refresh(self) -> None:
        state, trace = self.state, self.state.trace
        labels = trace.labels if trace is not None else ()
        special = getattr(trace, "special", ()) if trace is not None else ()
        if (labels, special) != self._labels:  # a new prompt: lay the chips out again
            self._labels = (labels, special)
            self.canvas.set_tokens(labels, special)
        if state.query_index != self.canvas.selected:
            QTimer.singleShot(0, self.show_selected)  # after the scroll area has taken the new height
        self.canvas.set_selected(state.query_index)
        diff = state.patch_differences()
        self.canvas.set_marked(diff[0] if diff is not None else None)
        values, legend = chip_values(state, self.mode, self._fetched_row(), self._logprobs_stopped())
        overlay = self._overlay()
        if overlay is not None:  # a shown view (routes, rollout) colours the tokens by its own values
            values, legend = overlay
        self.legend.setText(legend)
        self.canvas.set_colors(self.colors_for(values, accent=None if overlay is None else _OVERLAY))

    def _on_failure(self, failure) -> None:
        from transformer_viewer.viewer.worker.requests import LogprobsRequest

        trace = self.state.trace
        if failure.cancelled and isinstance(failure.request, LogprobsRequest) and trace is not None:
            self._stopped_run = trace.run_id
            self.refresh()

    def _on_busy(self, busy: bool) -> None:
        if busy and self._stopped_run is not None:  # working again: the pass may be on its way
            self._stopped_run = None
            self.refresh()

    def _logprobs_stopped(self) -> bool:
        trace = self.state.trace
        return trace is not None and trace.token_logprobs is None and trace.run_id == self._stopped_run

    def _fetched_row(self) -> np.ndarray | None:
        """The query's attention row from the worker, when the trace does not hold it: the one
        fetched for this head and query, or None while a request for it is on its way."""
        st, trace = self.state, self.state.trace
        if self.mode != "attention" or trace is None or st.query_index is None or self.worker is None:
            return None
        L, h, q = st.layer, st.head, st.query_index
        if not (0 <= L < trace.mask.shape[0] and 0 <= h < trace.mask.shape[1] and 0 <= q < trace.n_tokens):
            return None
        if attention_row(trace, L, h, q) is not None:
            return None
        want = (tile_source(trace.run_id, L, h), q)
        if self._row is not None and self._row[:2] == want:
            return self._row[2]
        if self._asked != want:
            self._asked = want
            self.worker.submit(PatternRowRequest(run_id=trace.run_id, layer=L, head=h, rows=(q, q + 1), cols=(0, q + 1)),
                               on_result=lambda answer: self._on_row(answer.value))
            if self._row is not None and self._row[:2] == want:
                return self._row[2]  # answered at once (the export command's inline worker)
        return None

    def _on_row(self, value) -> None:
        got = (value.source, value.rows[0])
        if got != self._asked:
            return  # the selection moved on while it was computed
        self._row = (*got, value.tile[0])
        self._asked = None
        self.refresh()

    def _overlay(self) -> tuple[np.ndarray, str] | None:
        """(values, legend) a shown view asks the tokens to be coloured by, if they fit the chips."""
        overlay = self.state.token_overlay
        if overlay is None or len(overlay[0]) != len(self.canvas.labels):
            return None
        return overlay[0], overlay[1]

    def colors_for(self, values: np.ndarray | None, accent=None) -> np.ndarray:
        """(n, 3) uint8 RGB of each chip for `values` (`accent`: the colour of the largest)."""
        n = len(self.canvas.labels)
        if values is None or n == 0 or len(values) != n:
            return np.tile(np.array(BASE_RGB, dtype=np.uint8), (n, 1))
        values = np.asarray(values, dtype=np.float64)
        finite = values[np.isfinite(values)]
        if self.mode == "neuron":
            scale = float(np.abs(finite).max()) if finite.size else 1.0
            scale = scale or 1.0
            pos, neg = mix(_WHITE, _POS, np.abs(values) / scale), mix(_WHITE, _NEG, np.abs(values) / scale)
            return np.where((values >= 0)[:, None] | ~np.isfinite(values)[:, None], pos, neg)
        top = float(finite.max()) if finite.size else 1.0
        top = top if top > 0 else 1.0
        return mix(_WHITE, accent or _ACCENT.get(self.mode, _OVERLAY), values / top)

    def tooltip_text(self, i: int) -> str:
        trace, clean = self.state.trace, self.state.clean_trace
        if trace is None or i >= trace.n_tokens:
            return ""
        lines = [f"{trace.labels[i]!r}   id {int(trace.token_ids[i])}   position {i}"]
        if i < len(trace.special) and trace.special[i]:
            lines.append("special token: added by the tokenizer or typed as its name, not ordinary text")
        diff = self.state.patch_differences()
        if diff is not None and i < len(diff[0]) and diff[0][i]:
            lines.append("differs from the corrupted prompt (outlined)")
        lp = math.nan if trace.token_logprobs is None else float(trace.token_logprobs[i])
        if trace.token_logprobs is None:
            lines.append("p: stopped (Ctrl+Enter in the prompt computes it)" if self._logprobs_stopped() else
                         "p: still being computed" + (f" for the {run_name(trace.intervention)} model" if trace is not clean else ""))
        elif not math.isfinite(lp):
            lines.append("first token: the model has nothing to predict it from")
        else:
            lines.append(f"p = {math.exp(lp):.4g}   surprisal {-lp:.2f} nats" + (f"   ({run_name(trace.intervention)} model)" if trace is not clean else ""))
            if clean is not None and trace is not clean and clean.token_logprobs is not None and i < clean.n_tokens:
                lines.append(f"clean model: p = {math.exp(float(clean.token_logprobs[i])):.4g}")
        values, _ = chip_values(self.state, self.mode, self._fetched_row())
        name = MODES.get(self.mode, self.mode)
        overlay = self._overlay()
        if overlay is not None:
            values, name = overlay[0], overlay[1].split(":")[0]
        if values is not None and math.isfinite(values[i]):
            lines.append(f"{name}: {values[i]:.4g}")
        lines.append("click to make it the query")
        return "\n".join(lines)
