"""Plain messages laid over a plot: one that has nothing to show yet, and one whose result
belongs to an earlier prompt.

A pyqtgraph plot with no data still draws axes (a -500..500 "(x0.001)" grid, -0.5..0.5 around
an empty image), which read as data. An EmptyState covers its widget with the window's plain
background and a line saying what the plot waits for ("type a prompt", "computing…", "press
Run scan"); it follows the widget's size and hides when told the plot has something to draw.
It is a sibling of the plot's graphics view, never inside it, so exports never include it.

A StaleMark is a strip across the top of a plot that still shows a result computed for another
prompt (a head scan runs only when asked; the logit lens and head attribution are recomputed
when shown): it says whose result it is and what brings it up to date.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QLabel, QWidget


class Overlay(QLabel):
    """A label laid over `view` (its child), following its size, hidden until `show_message`."""

    def __init__(self, view: QWidget, name: str, style: str):
        super().__init__(view)
        self.view = view
        self.setObjectName(name)
        self.setWordWrap(True)
        self.setAutoFillBackground(True)  # the window's plain background hides the plot beneath
        self.setStyleSheet(style)
        view.installEventFilter(_FollowSize(self))
        self.place(view.rect())
        self.hide()

    def place(self, rect) -> None:
        """Where over the view's `rect` the label sits: all of it."""
        self.setGeometry(rect)

    def show_message(self, text: str | None) -> None:
        """Show `text` over the view; None hides it."""
        if text is None:
            self.hide()
            return
        self.setText(text)
        self.place(self.view.rect())
        self.raise_()
        self.show()

    def message(self) -> str | None:
        """The text shown now, or None."""
        return None if self.isHidden() else self.text()


class EmptyState(Overlay):
    """A message covering `view` while there is nothing to show."""

    def __init__(self, view: QWidget):
        super().__init__(view, "EmptyState", "QLabel#EmptyState { color: palette(mid); font-size: 13pt; }")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)


def quoted_prompt(text: str, limit: int = 40) -> str:
    """A prompt as a stale mark names it: one line, cut to `limit` characters."""
    line = " ".join(text.split())
    return repr(line if len(line) <= limit else line[: limit - 1] + "\u2026")


class StaleMark(Overlay):
    """A strip across the top of `view` saying its result is for another prompt; hidden until
    `show_message` gives it a text."""

    def __init__(self, view: QWidget):
        # Amber with dark text: reads as a warning on the dark plots and the light window alike.
        super().__init__(view, "StaleMark", "QLabel#StaleMark { background: #ffe08a; color: #3d2e00; "
                         "padding: 3px 6px; border-bottom: 1px solid #b38600; }")

    def place(self, rect) -> None:
        width = rect.width()
        self.setGeometry(0, 0, width, max(self.heightForWidth(width), self.sizeHint().height()))


class _FollowSize(QObject):
    def __init__(self, label: Overlay):
        super().__init__(label)
        self.label = label

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt name
        if event.type() == QEvent.Type.Resize:
            self.label.place(obj.rect())
        return False
