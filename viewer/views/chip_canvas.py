"""The painted token chips of the token strip: one widget, no child widget per token.

Chips are laid out once per token list and width (each distinct text measured once) and
painted only where exposed, with their colours kept as one (n, 3) RGB array, so 8k tokens
stay fast: a recolouring is a numpy operation, and QColors are made for the visible chips only.
"""

from __future__ import annotations

import bisect

import numpy as np
from PySide6.QtCore import QEvent, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import QToolTip, QWidget

MAX_CHARS = 16
PAD_X, PAD_Y, GAP = 4, 2, 3
BASE_RGB = (238, 238, 238)
_BASE = QColor(*BASE_RGB)
_SPECIAL = QColor(110, 60, 170)  # border and text of special tokens (BOS, <|endoftext|>): not text of the prompt
_MARKED = QColor(230, 120, 0)  # the outline of a marked token (one that differs from the other prompt's)


def mix(a, b, t: np.ndarray) -> np.ndarray:
    """(n, 3) uint8 colours from RGB `a` towards RGB `b` by t in [0, 1]; NaN t: the base grey."""
    t = np.asarray(t, dtype=np.float64)
    ok = np.isfinite(t)
    t = np.clip(np.where(ok, t, 0.0), 0.0, 1.0)[:, None]  # (n, 1)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    rgb = np.rint(a + (b - a) * t)  # (n, 3)
    rgb[~ok] = BASE_RGB
    return rgb.astype(np.uint8)


class ChipRects:
    """The chips' rectangles, as a sequence of QRects made when asked (8k QRects cost more than
    the layout itself)."""

    def __init__(self, xs=(), ys=(), widths=(), height: int = 0):
        # Python ints: a paint reads a few hundred of them, numpy scalars would be converted each time.
        self._xs, self._ys, self._ws, self._h = list(map(int, xs)), list(map(int, ys)), list(map(int, widths)), height

    def __len__(self) -> int:
        return len(self._xs)

    def __getitem__(self, i: int) -> QRect:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return QRect(self._xs[i], self._ys[i], self._ws[i], self._h)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __bool__(self) -> bool:
        return len(self) > 0


class ChipCanvas(QWidget):
    """The painted chips. Height follows the width; the scroll area scrolls it."""

    token_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setMouseTracking(True)
        self.setMinimumWidth(80)
        self.labels: tuple[str, ...] = ()
        self._widths: list[int] = []
        self.rects = ChipRects()
        self._row_tops: list[int] = []  # y of each line, for hit testing
        self._row_first: list[int] = []  # first chip index of each line
        self.colors = np.zeros((0, 3), dtype=np.uint8)  # (n, 3) RGB of each chip
        self.special: tuple[bool, ...] = ()
        self.selected: int | None = None
        self.marked = np.zeros(0, dtype=bool)  # (n,) tokens outlined (those differing from another prompt's)
        self.tooltip_for = lambda i: ""
        self._laid_out_width = -1

    def set_tokens(self, labels: tuple[str, ...], special: tuple[bool, ...] = ()) -> None:
        self.labels = tuple(labels)
        self.special = tuple(special) if len(special) == len(self.labels) else (False,) * len(self.labels)
        fm = QFontMetrics(self.font())
        self._short = [lab if len(lab) <= MAX_CHARS else lab[: MAX_CHARS - 1] + "…" for lab in self.labels]
        # A long prompt repeats its tokens: measure each distinct text once.
        widths = {s: fm.horizontalAdvance(s or " ") + 2 * PAD_X for s in set(self._short)}
        self._widths = [widths[s] for s in self._short]
        self.colors = np.tile(np.array(BASE_RGB, dtype=np.uint8), (len(self.labels), 1))
        self._laid_out_width = -1
        self._layout(self.width())
        self.update()

    def set_colors(self, colors: np.ndarray) -> None:
        """(n, 3) uint8 RGB per chip; QColors are made only for the chips painted."""
        self.colors = np.asarray(colors, dtype=np.uint8)
        self.update()

    def set_marked(self, marked) -> None:
        """Outline the chips where `marked` (n,) bool is true; None: none."""
        marked = np.zeros(0, dtype=bool) if marked is None else np.asarray(marked, dtype=bool)
        if marked.shape != self.marked.shape or (marked != self.marked).any():
            self.marked = marked
            self.update()

    def set_selected(self, index: int | None) -> None:
        if index != self.selected:
            self.selected = index
            self.update()

    def _layout(self, width: int) -> None:
        """Greedy line wrapping: each chip's x, y and width. Only the first chip of each line is
        found in a loop (one bisection of a Python list per line: a narrow strip has a line per
        token, 16k of them at a long prompt); the positions then follow in numpy."""
        if width == self._laid_out_width:
            return
        self._laid_out_width = width
        line_h = QFontMetrics(self.font()).height() + 2 * PAD_Y
        n = len(self._widths)
        w = np.minimum(np.asarray(self._widths, dtype=np.int64), max(20, width - 2 * GAP))  # (n,)
        ends = np.concatenate([[0], np.cumsum(w + GAP)])  # chip k ends at ends[k + 1] - ends[first] on its line
        ends_list = ends.tolist()
        firsts, i = [], 0
        while i < n:
            firsts.append(i)
            # The chips after i that end within the line (at least one: a wide chip gets its own line).
            i = max(i + 1, bisect.bisect_right(ends_list, ends_list[i] + width - GAP) - 1)
        first = np.asarray(firsts, dtype=np.int64)  # (lines,)
        line = np.repeat(np.arange(len(firsts)), np.diff(np.append(first, n)))  # (n,) each chip's line
        tops = GAP + np.arange(len(firsts), dtype=np.int64) * (line_h + GAP)  # (lines,)
        xs, ys = GAP + ends[:n] - ends[first][line], tops[line]  # (n,) each
        self.rects = ChipRects(xs, ys, w, line_h)
        self._row_tops, self._row_first = tops.tolist(), firsts
        height = (int(ys[-1]) + line_h + GAP) if n else line_h + 2 * GAP
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
        last = bisect.bisect_right(self._row_tops, exposed.bottom())  # the first line below the exposed area
        end = self._row_first[last] if last < len(self._row_first) else len(self.rects)
        plain, italic = p.font(), p.font()
        italic.setItalic(True)
        in_italic = False
        colors = self.colors[start:end].tolist()  # one conversion of the exposed chips, not one per chip
        selected_pen, special_pen = QPen(QColor(20, 20, 20), 2.5), QPen(_SPECIAL, 1.5, Qt.DashLine)
        marked_pen = QPen(_MARKED, 2.5)
        marked = self.marked.tolist() if len(self.marked) == len(self.rects) else []
        black, white = QColor(0, 0, 0), QColor(255, 255, 255)
        align = Qt.AlignVCenter | Qt.AlignLeft
        for i in range(start, end):
            r = self.rects[i]
            if not r.intersects(exposed):
                continue
            bg = QColor(*colors[i - start]) if i - start < len(colors) else _BASE
            p.setBrush(bg)
            special = i < len(self.special) and self.special[i]
            if i == self.selected:
                p.setPen(selected_pen)
            elif marked and marked[i]:
                p.setPen(marked_pen)
            else:
                p.setPen(special_pen if special else QPen(bg.darker(125), 1))
            p.drawRoundedRect(r.adjusted(1, 1, -1, -1), 4, 4)
            light = 0.299 * bg.red() + 0.587 * bg.green() + 0.114 * bg.blue() > 140
            p.setPen((_SPECIAL if special else black) if light else white)
            if special != in_italic:  # a font change re-resolves glyphs: only when it changes
                in_italic = special
                p.setFont(italic if special else plain)
            p.drawText(r.adjusted(PAD_X, 0, -PAD_X + 1, 0), align, self._short[i])

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
