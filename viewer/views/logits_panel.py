"""Next-token predictions, baseline (clean model) and masked (or clamped) side by side, at the selected
position, with what the mask did to the baseline's favourite: its new probability and rank,
and KL(baseline || masked) over the whole vocabulary."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QMenu,
    QStyledItemDelegate,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from transformer_viewer.viewer.views.parts import run_name

BAR_ROLE = Qt.UserRole + 1
TOKEN_ROLE = Qt.UserRole + 3  # a token cell's id, for the context menu
_BASE_BAR, _MASK_BAR = QColor(90, 140, 220, 110), QColor(220, 90, 70, 110)
_SPECIAL = QColor(110, 60, 170)  # special tokens (BOS, <|endoftext|>), as the token strip draws them


@dataclass(frozen=True)
class Comparison:
    """What masking did to the next-token distribution at one position."""

    top_id: int  # the baseline's most likely token
    p_baseline: float
    p_masked: float
    new_rank: int  # 1-based rank of top_id under the mask
    kl: float  # KL(baseline || masked), nats

    @property
    def delta(self) -> float:
        return self.p_masked - self.p_baseline


def compare(baseline, masked) -> Comparison:
    """Compare two NextToken distributions over the same vocabulary."""
    p = baseline.probs.astype(np.float64)  # (V,)
    q = masked.probs.astype(np.float64)  # (V,)
    top = int(baseline.top_ids[0])
    support = p > 0
    kl = float(np.sum(p[support] * (np.log(p[support]) - np.log(np.maximum(q[support], 1e-300)))))
    rank = 1 + int(np.count_nonzero(q > q[top]))
    return Comparison(top, float(p[top]), float(q[top]), rank, max(kl, 0.0))


def token_label(token_id: int, tokenizer) -> str:
    """The visible label of a token id in `tokenizer`, the loaded model's (`ViewerState.tokenizer()`:
    an id means another token in another vocabulary)."""
    try:
        return tokenizer.label(int(token_id))
    except Exception:  # noqa: BLE001 - an id past the tokenizer (padded vocab) still needs a name
        return f"<{int(token_id)}>"


def _is_special(tokenizer, token_id: int) -> bool:
    try:
        return bool(tokenizer.is_special(int(token_id)))
    except Exception:  # noqa: BLE001 - an id past the tokenizer (padded vocab) is no special token
        return False


def changed(intervention) -> str:
    """What an intervention changes, for the summary: "2 heads masked (zero), 1 feature clamped"."""
    parts = []
    n, k = intervention.n_masked, len(intervention.clamps)
    if n:
        parts.append(f"{n} head{'s' if n != 1 else ''} masked ({intervention.ablation})")
    if k:
        parts.append(f"{k} feature{'s' if k != 1 else ''} clamped")
    return ", ".join(parts) or "nothing changed"


def format_prob(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 or p == 0 else f"{p:.1e}"


class _BarDelegate(QStyledItemDelegate):
    """Draws the probability as a bar behind the number."""

    def paint(self, painter, option, index) -> None:
        value = index.data(BAR_ROLE)
        if value is not None:
            color = index.data(Qt.UserRole + 2) or _BASE_BAR
            r = QRectF(option.rect).adjusted(1, 2, -1, -2)
            painter.fillRect(QRectF(r.left(), r.top(), r.width() * max(0.0, min(1.0, float(value))), r.height()), color)
        super().paint(painter, option, index)


BarDelegate = _BarDelegate  # other tables draw their values' bars alike (the SAE features panel)


class LogitsPanel(QWidget):
    """Top-k next tokens, baseline vs masked, following `state.query`."""

    COLUMNS = ("#", "baseline", "p", "masked", "p")

    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.header = QLabel("no prediction yet")
        self.header.setWordWrap(True)
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(self.COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.NoSelection)
        self.table.setFocusPolicy(Qt.NoFocus)
        self.table.setItemDelegate(_BarDelegate(self.table))
        # Right-click a token: make it token A or B of the patching view's metric.
        self.table.setContextMenuPolicy(Qt.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self._token_menu)
        hh = self.table.horizontalHeader()
        for col, mode in enumerate((QHeaderView.ResizeToContents, QHeaderView.Stretch, QHeaderView.ResizeToContents,
                                    QHeaderView.Stretch, QHeaderView.ResizeToContents)):
            hh.setSectionResizeMode(col, mode)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.header)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.summary)
        self.comparison: Comparison | None = None
        self._compared = None  # (baseline, masked, their Comparison)
        self.preview = False  # the masked column shows a quick prediction, not yet the trace's
        state.trace_changed.connect(lambda _t: self.refresh())
        state.model_changed.connect(lambda _i: self.refresh())

    def refresh(self) -> None:
        trace, clean = self.state.trace, self.state.clean_trace
        self.preview = False
        if trace is None or clean is None:
            self.header.setText("no prediction yet")
            self.table.setRowCount(0)
            self.summary.setText("")
            self.comparison = None
            return
        self._show(trace, clean.next, trace.next, trace.intervention)

    def show_preview(self, masked, intervention) -> None:
        """The distribution under an intervention the views have not caught up with yet (a head
        toggle's quick answer); the trace that follows replaces it."""
        trace, clean = self.state.trace, self.state.clean_trace
        if trace is None or clean is None or masked.position >= trace.n_tokens:
            return
        self._show(trace, clean.next, masked, intervention,
                   note=" Updating the other views\u2026")
        self.preview = True

    def _show(self, trace, base, masked, intervention, note: str = "") -> None:
        pos = masked.position
        label = trace.labels[pos] if pos < trace.n_tokens else "?"
        where = "the last token" if pos == trace.n_tokens - 1 else "the selected token"
        self.header.setText(f"Next token after position {pos} {label!r} ({where})")
        name = "masked" if intervention.is_empty else run_name(intervention)
        self.table.horizontalHeaderItem(3).setText(name)
        self._fill(base, masked)
        self.comparison = c = self._compare(base, masked)
        if intervention.is_empty:
            self.summary.setText(f"No head masked and no feature clamped: the masked column equals the baseline. "
                                 f"Top token {token_label(c.top_id, self.state.tokenizer())!r} at p = {format_prob(c.p_baseline)}.")
            return
        sign = "+" if c.delta >= 0 else "\u2212"
        self.summary.setText(
            f"{changed(intervention)}. Baseline top {token_label(c.top_id, self.state.tokenizer())!r}: "
            f"p {format_prob(c.p_baseline)} \u2192 {format_prob(c.p_masked)} ({sign}{format_prob(abs(c.delta))}), "
            f"rank 1 \u2192 {c.new_rank}. "
            f"KL(baseline \u2016 {name}) = {c.kl:.4f} nats.{note}")

    def _compare(self, base, masked) -> Comparison:
        """`compare` once per pair of distributions: it reads the whole vocabulary (150k-260k
        entries for current models), a redraw for a new selection or a preview reuses it."""
        cached = self._compared
        if cached is None or cached[0] is not base or cached[1] is not masked:
            self._compared = cached = (base, masked, compare(base, masked))
        return cached[2]

    def _fill(self, base, masked) -> None:
        k = max(len(base.top_ids), len(masked.top_ids))
        top = int(base.top_ids[0])
        tok = self.state.tokenizer()
        cells = []  # (row, col, item), each item complete before the table sees it
        for row in range(k):
            cells.append((row, 0, self._item(str(row + 1), align=Qt.AlignRight)))
            for col, nt, color in ((1, base, _BASE_BAR), (3, masked, _MASK_BAR)):
                if row >= len(nt.top_ids):
                    continue
                tid, prob = int(nt.top_ids[row]), float(nt.top_probs[row])
                item = self._item(token_label(tid, tok))
                item.setData(TOKEN_ROLE, tid)
                special = _is_special(tok, tid)
                item.setToolTip(f"id {tid}, p = {prob:.5g}, logit {float(nt.top_logits[row]):.3f}"
                                + (", a special token" if special else ""))
                font = item.font()
                font.setBold(col == 3 and tid == top)
                font.setItalic(special)  # not text: drawn like the token strip's special chips
                item.setFont(font)
                if special:
                    item.setForeground(_SPECIAL)
                p_item = self._item(format_prob(prob), align=Qt.AlignRight)
                p_item.setData(BAR_ROLE, prob)
                p_item.setData(Qt.UserRole + 2, color)
                cells += [(row, col, item), (row, col + 1, p_item)]
        # Columns sized to their contents re-measure every row at each change of an item: 50
        # changes cost 8 ms in the window. Fixed while the items go in, then measured once.
        header = self.table.horizontalHeader()
        modes = [header.sectionResizeMode(c) for c in range(header.count())]
        for c in range(header.count()):
            header.setSectionResizeMode(c, QHeaderView.Fixed)
        self.table.setRowCount(k)
        for row, col, item in cells:
            self.table.setItem(row, col, item)
        for c, mode in enumerate(modes):
            header.setSectionResizeMode(c, mode)

    def _token_menu(self, pos) -> None:
        item = self.table.itemAt(pos)
        tid = None if item is None else item.data(TOKEN_ROLE)
        if tid is None:
            return
        menu = QMenu(self)
        for which, text in ((0, "Use as patching token A"), (1, "Use as patching token B")):
            menu.addAction(text, lambda w=which: self.use_as_token(int(tid), w))
        menu.popup(self.table.viewport().mapToGlobal(pos))

    def use_as_token(self, token_id: int, which: int) -> None:
        """Make `token_id` token A (0) or B (1) of the patching metric; B without an A takes the
        baseline's top token as A (the difference B is compared with)."""
        st = self.state
        tokens = list(st.patching.tokens)
        if which == 0:
            tokens[:1] = [token_id]
        else:
            if not tokens:
                top = st.clean_trace.next.top_ids[0] if st.clean_trace is not None else token_id
                tokens = [int(top)]
            tokens[1:2] = [token_id]
        changes = {"tokens": tuple(tokens)}
        if which == 1:
            changes["metric"] = "logit-diff"  # B only means something in a difference
        st.set_patching(**changes)

    @staticmethod
    def _item(text: str, align=Qt.AlignLeft) -> QTableWidgetItem:
        item = QTableWidgetItem(text)
        item.setTextAlignment(align | Qt.AlignVCenter)
        return item

    def rows(self) -> list[tuple[str, float, str, float]]:
        """The table as (baseline label, p, masked label, p) rows, for tests and export."""
        out = []
        for row in range(self.table.rowCount()):
            cells = [self.table.item(row, c) for c in range(1, 5)]
            out.append(tuple(c.text() if i % 2 == 0 else float(c.text()) for i, c in enumerate(cells) if c))
        return out
