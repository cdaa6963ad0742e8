"""The tokenized prompt as chips: one per token, wrapped into lines, coloured by a quantity.

Chips are painted by one widget inside a scroll area (no child widget per token), laid out
once per trace and width, and painted only where exposed, so 1000 tokens stay fast. Clicking a
chip selects it as the query position; hovering shows id, position and probability.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
from PySide6.QtCore import QEvent, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QScrollArea, QToolTip, QVBoxLayout, QWidget

MAX_CHARS = 16
PAD_X, PAD_Y, GAP = 4, 2, 3
MODES = {"none": "nothing", "attention": "attention from the query", "surprisal": "surprisal", "neuron": "MLP neuron"}
_ACCENT = {"attention": QColor(255, 140, 0), "surprisal": QColor(220, 60, 60)}
_NEG, _POS = QColor(60, 110, 220), QColor(40, 160, 80)
_BASE = QColor(238, 238, 238)
_SPECIAL = QColor(110, 60, 170)  # border and text of special tokens (BOS, <|endoftext|>): not text of the prompt


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    t = 0.0 if not math.isfinite(t) else max(0.0, min(1.0, t))
    return QColor(round(a.red() + (b.red() - a.red()) * t), round(a.green() + (b.green() - a.green()) * t),
                  round(a.blue() + (b.blue() - a.blue()) * t))


def chip_values(state, mode: str) -> tuple[np.ndarray | None, str]:
    """The per-token values a colour mode shows, and a one-line legend (None: no colouring)."""
    trace = state.trace
    if trace is None or mode == "none":
        return None, ""
    L, h, q = state.layer, state.head, state.query_index
    n_layer, n_head = trace.head_norms.shape[:2]
    if not (0 <= L < n_layer and 0 <= h < n_head and 0 <= q < trace.n_tokens):
        # The selection already belongs to a newly loaded model whose first trace is on its way.
        return None, ""
    if mode == "attention":
        row = trace.attention[L, h, q].astype(np.float32)  # (T,), keys after q are zero (causal)
        values = np.where(np.arange(trace.n_tokens) <= q, row, np.nan)
        return values, f"attention from {trace.labels[q]!r} ({q}) in L{L}H{h}; max {np.nanmax(values):.3f}"
    if mode == "surprisal":
        if trace.token_logprobs is None:
            return None, "surprisal: computing the masked model's log-probabilities…"
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


class ChipCanvas(QWidget):
    """The painted chips. Height follows the width; the scroll area scrolls it."""

    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setMouseTracking(True)
        self.setMinimumWidth(80)
        self.labels: tuple[str, ...] = ()
        self._widths: list[int] = []
        self.rects: list[QRect] = []
        self._row_tops: list[int] = []  # y of each line, for hit testing
        self._row_first: list[int] = []  # first chip index of each line
        self.colors: list[QColor] = []
        self.special: tuple[bool, ...] = ()
        self.selected: int | None = None
        self.tooltip_for = lambda i: ""
        self._laid_out_width = -1

    def set_tokens(self, labels: tuple[str, ...], special: tuple[bool, ...] = ()) -> None:
        self.labels = tuple(labels)
        self.special = tuple(special) if len(special) == len(self.labels) else (False,) * len(self.labels)
        fm = QFontMetrics(self.font())
        self._short = [lab if len(lab) <= MAX_CHARS else lab[: MAX_CHARS - 1] + "…" for lab in self.labels]
        self._widths = [fm.horizontalAdvance(s or " ") + 2 * PAD_X for s in self._short]
        self.colors = [_BASE] * len(self.labels)
        self._laid_out_width = -1
        self._layout(self.width())
        self.update()

    def set_colors(self, colors: list[QColor]) -> None:
        self.colors = colors
        self.update()

    def set_selected(self, index: int | None) -> None:
        if index != self.selected:
            self.selected = index
            self.update()

    def _layout(self, width: int) -> None:
        if width == self._laid_out_width:
            return
        self._laid_out_width = width
        line_h = QFontMetrics(self.font()).height() + 2 * PAD_Y
        x = y = GAP
        self.rects, self._row_tops, self._row_first = [], [], []
        for i, w in enumerate(self._widths):
            w = min(w, max(20, width - 2 * GAP))
            if x + w > width - GAP and x > GAP:
                x, y = GAP, y + line_h + GAP
            if not self._row_tops or self._row_tops[-1] != y:
                self._row_tops.append(y)
                self._row_first.append(i)
            self.rects.append(QRect(x, y, w, line_h))
            x += w + GAP
        height = (y + line_h + GAP) if self.rects else line_h + 2 * GAP
        if self.minimumHeight() != height:
            self.setMinimumHeight(height)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt name
        self._layout(event.size().width())
        super().resizeEvent(event)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(600, self.minimumHeight())

    def index_at(self, pos) -> int | None:
        line = bisect.bisect_right(self._row_tops, pos.y()) - 1
        if line < 0:
            return None
        end = self._row_first[line + 1] if line + 1 < len(self._row_first) else len(self.rects)
        for i in range(self._row_first[line], end):
            if self.rects[i].contains(pos):
                return i
        return None

    def paintEvent(self, event) -> None:  # noqa: N802
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        exposed = event.rect()
        if not self.rects:
            p.setPen(self.palette().color(self.palette().ColorRole.PlaceholderText))
            p.drawText(self.rect().adjusted(GAP * 2, 0, 0, 0), Qt.AlignVCenter | Qt.AlignLeft, "no tokens yet")
            return
        first = max(0, bisect.bisect_right(self._row_tops, exposed.top() - 40) - 1)
        start = self._row_first[first]
        plain, italic = p.font(), p.font()
        italic.setItalic(True)
        for i in range(start, len(self.rects)):
            r = self.rects[i]
            if r.top() > exposed.bottom():
                break
            if not r.intersects(exposed):
                continue
            bg = self.colors[i] if i < len(self.colors) else _BASE
            p.setBrush(bg)
            selected = i == self.selected
            special = i < len(self.special) and self.special[i]
            if selected:
                p.setPen(QPen(QColor(20, 20, 20), 2.5))
            else:
                p.setPen(QPen(_SPECIAL, 1.5, Qt.DashLine) if special else QPen(bg.darker(125), 1))
            p.drawRoundedRect(r.adjusted(1, 1, -1, -1), 4, 4)
            light = 0.299 * bg.red() + 0.587 * bg.green() + 0.114 * bg.blue() > 140
            p.setPen((_SPECIAL if special else QColor(0, 0, 0)) if light else QColor(255, 255, 255))
            p.setFont(italic if special else plain)
            p.drawText(r.adjusted(PAD_X, 0, -PAD_X + 1, 0), Qt.AlignVCenter | Qt.AlignLeft, self._short[i])

    def mousePressEvent(self, event) -> None:  # noqa: N802
        if event.button() == Qt.LeftButton:
            i = self.index_at(event.position().toPoint())
            if i is not None:
                self.token_clicked.emit(i)
                return
        super().mousePressEvent(event)

    def event(self, event) -> bool:
        if event.type() == QEvent.ToolTip:
            i = self.index_at(event.pos())
            if i is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), self.tooltip_for(i), self, self.rects[i])
            return True
        return super().event(event)


class TokenStrip(QWidget):
    """Chips for the current trace, linked to a ViewerState."""

    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
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
        state.trace_changed.connect(self._on_trace)
        state.selection_changed.connect(self.refresh)
        state.neuron_changed.connect(self._on_neuron)
        state.activations_changed.connect(lambda _layer: self.refresh() if self.mode == "neuron" else None)
        self._labels: tuple = ((), ())  # (labels, special flags) the chips show

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

    def _on_trace(self, trace) -> None:
        labels = trace.labels if trace is not None else ()
        special = getattr(trace, "special", ()) if trace is not None else ()
        if (labels, special) != self._labels:
            self._labels = (labels, special)
            self.canvas.set_tokens(labels, special)
        self.refresh()

    def refresh(self) -> None:
        state = self.state
        if state.query_index != self.canvas.selected:
            QTimer.singleShot(0, self.show_selected)  # after the scroll area has taken the new height
        self.canvas.set_selected(state.query_index)
        values, legend = chip_values(state, self.mode)
        self.legend.setText(legend)
        self.canvas.set_colors(self.colors_for(values))

    def colors_for(self, values: np.ndarray | None) -> list[QColor]:
        n = len(self.canvas.labels)
        if values is None or n == 0:
            return [_BASE] * n
        finite = values[np.isfinite(values)]
        if self.mode == "neuron":
            scale = float(np.abs(finite).max()) if finite.size else 1.0
            scale = scale or 1.0
            return [_BASE if not math.isfinite(v) else _mix(QColor(255, 255, 255), _POS if v >= 0 else _NEG, abs(v) / scale)
                    for v in values.tolist()]
        top = float(finite.max()) if finite.size else 1.0
        top = top if top > 0 else 1.0
        accent = _ACCENT[self.mode]
        return [_BASE if not math.isfinite(v) else _mix(QColor(255, 255, 255), accent, v / top) for v in values.tolist()]

    def tooltip_text(self, i: int) -> str:
        trace, clean = self.state.trace, self.state.clean_trace
        if trace is None or i >= trace.n_tokens:
            return ""
        lines = [f"{trace.labels[i]!r}   id {int(trace.token_ids[i])}   position {i}"]
        if i < len(trace.special) and trace.special[i]:
            lines.append("special token: added by the tokenizer or typed as its name, not ordinary text")
        lp = math.nan if trace.token_logprobs is None else float(trace.token_logprobs[i])
        if trace.token_logprobs is None:
            lines.append("p: still being computed" + (" for the masked model" if trace is not clean else ""))
        elif not math.isfinite(lp):
            lines.append("first token: the model has nothing to predict it from")
        else:
            lines.append(f"p = {math.exp(lp):.4g}   surprisal {-lp:.2f} nats" + ("   (masked model)" if trace is not clean else ""))
            if clean is not None and trace is not clean and clean.token_logprobs is not None and i < clean.n_tokens:
                lines.append(f"clean model: p = {math.exp(float(clean.token_logprobs[i])):.4g}")
        values, _ = chip_values(self.state, self.mode)
        if values is not None and math.isfinite(values[i]):
            lines.append(f"{MODES[self.mode]}: {values[i]:.4g}")
        lines.append("click to make it the query")
        return "\n".join(lines)
