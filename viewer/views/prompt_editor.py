"""The prompt: runs the model as the user types (debounced) and at once on Ctrl+Enter.

Tokenizing happens on the worker, so even a 1 MB paste never stalls typing here. Below the
editor a notice line says when the prompt does not fit the model's context (the model sees the
last block_size tokens) or why it could not run.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QVBoxLayout, QWidget

DEBOUNCE_MS = 250


class PromptEditor(QWidget):
    """Emits `run_requested(text)` 250 ms after the last edit, or at once on Ctrl+Enter."""

    run_requested = Signal(object)  # str; `object` hands a 1 MB prompt over without two UTF-16 copies

    def __init__(self, parent: QWidget | None = None, debounce_ms: int = DEBOUNCE_MS):
        super().__init__(parent)
        self.edit = QPlainTextEdit()
        self.edit.setPlaceholderText("Type a prompt; the model runs as you type (Ctrl+Enter runs now)")
        self.edit.setTabChangesFocus(True)
        lines = QFontMetrics(self.edit.font()).lineSpacing()
        self.edit.setMinimumHeight(3 * lines + 12)
        self.notice = QLabel()
        self.notice.setWordWrap(True)
        self.notice.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.notice.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.notice)
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(debounce_ms)
        self.timer.timeout.connect(self.run_now)
        self._text: str | None = None  # the editor's text until the next edit (toPlainText copies it all)
        self.edit.textChanged.connect(self._edited)
        self.edit.textChanged.connect(self.timer.start)
        self.edit.installEventFilter(self)  # Ctrl+Enter runs now instead of adding a line

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt name
        if (obj is self.edit and event.type() == QEvent.KeyPress and event.key() in (Qt.Key_Return, Qt.Key_Enter)
                and event.modifiers() & Qt.ControlModifier):
            self.run_now()
            return True
        return super().eventFilter(obj, event)

    def _edited(self) -> None:
        self._text = None

    def editing(self) -> bool:
        """True while keystrokes wait for the debounce to run them."""
        return self.timer.isActive()

    def text(self) -> str:
        if self._text is None:
            self._text = self.edit.toPlainText()
        return self._text

    def set_text(self, text: str, run: bool = True) -> None:
        """Replace the prompt; `run=True` runs it now instead of after the debounce."""
        if text != self.text():
            self.edit.blockSignals(True)
            self.edit.setPlainText(text)
            self.edit.blockSignals(False)
            self._text = text
        if run:
            self.run_now()

    def run_now(self) -> None:
        self.timer.stop()
        self.run_requested.emit(self.text())

    def show_notice(self, text: str, warning: bool = True) -> None:
        if not text:
            self.notice.hide()
            return
        color = "#a05a00" if warning else "palette(window-text)"
        self.notice.setStyleSheet(f"color: {color};")
        self.notice.setText(text)
        self.notice.show()

    def show_trace(self, trace, block_size: int) -> None:
        """The truncation notice for a trace (hidden when it all fits)."""
        dropped = int(getattr(trace, "dropped_tokens", 0) or 0)
        if dropped:
            total = dropped + trace.n_tokens
            self.show_notice(f"The prompt is {total} tokens, longer than the model's context of {block_size}: "
                             f"the first {dropped} are dropped and every view shows the last {trace.n_tokens}.")
        else:
            self.show_notice("")
