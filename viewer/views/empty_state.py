"""A plain message laid over a plot that has nothing to show yet.

A pyqtgraph plot with no data still draws axes (a -500..500 "(x0.001)" grid, -0.5..0.5 around
an empty image), which read as data. An EmptyState covers its widget with the window's plain
background and a line saying what the plot waits for ("type a prompt", "computing…", "press
Run scan"); it follows the widget's size and hides when told the plot has something to draw.
It is a sibling of the plot's graphics view, never inside it, so exports never include it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QLabel, QWidget


class EmptyState(QLabel):
    """A message covering `view` (its child, kept at its size) while there is nothing to show."""

    def __init__(self, view: QWidget):
        super().__init__(view)
        self.view = view
        self.setObjectName("EmptyState")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWordWrap(True)
        self.setAutoFillBackground(True)  # the window's plain background hides the axes beneath
        self.setStyleSheet("QLabel#EmptyState { color: palette(mid); font-size: 13pt; }")
        self._follow = _FollowSize(self)
        view.installEventFilter(self._follow)
        self.setGeometry(view.rect())
        self.hide()

    def show_message(self, text: str | None) -> None:
        """Cover the view with `text`; None uncovers it."""
        if text is None:
            self.hide()
            return
        self.setText(text)
        self.setGeometry(self.view.rect())
        self.raise_()
        self.show()

    def message(self) -> str | None:
        """The text covering the view now, or None."""
        return None if self.isHidden() else self.text()


class _FollowSize(QObject):
    def __init__(self, label: EmptyState):
        super().__init__(label)
        self.label = label

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt name
        if event.type() == QEvent.Type.Resize:
            self.label.setGeometry(obj.rect())
        return False
