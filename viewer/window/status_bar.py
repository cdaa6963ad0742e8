"""The status bar: model, parameters, device, last forward time, and a busy/progress indicator."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QToolButton

BUSY_DELAY_MS = 150  # a forward that answers faster than this never flashes the indicator


class StatusBar(QStatusBar):
    def __init__(self, window):
        super().__init__(window)
        self.window_ = window
        self.model_label = QLabel("no model loaded")
        self.params_label = QLabel("")
        self.device_label = QLabel("")
        self.forward_label = QLabel("")
        self.forward_label.setToolTip("time of the last forward pass on the worker thread")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.cancel_button = QToolButton(text="Cancel")
        self.cancel_button.setToolTip("cancel the running task")
        self.cancel_button.clicked.connect(self._cancel)
        self.cancel_button.hide()
        self._progress_kind: str | None = None
        self._progress_text = ""  # the message the last progress step showed
        for w in (self.progress, self.cancel_button, self.model_label, self.params_label,
                  self.device_label, self.forward_label):
            self.addPermanentWidget(w)
        self._busy_timer = QTimer(self)
        self._busy_timer.setSingleShot(True)
        self._busy_timer.setInterval(BUSY_DELAY_MS)
        self._busy_timer.timeout.connect(self._show_busy)

    def show_model(self, info) -> None:
        kind = f"{info.family}, {info.format}" if info.family else info.format
        self.model_label.setText(f"{info.name} ({kind})")
        self.model_label.setToolTip(info.source)
        self.params_label.setText(f"{info.params_text} · {info.n_layer} layers × {info.n_head} heads · "
                                  f"context {info.block_size}")
        self.device_label.setText(info.device)

    def show_forward(self, ms: float, first_layer: int = 0, n_layer: int = 0, compute_ms: float | None = None) -> None:
        """`ms`: the clock time of the last run on the worker; `compute_ms`: the worker thread's
        own CPU time in it. They differ when the window was redrawing meanwhile (a head toggle
        shows its prediction first, and the views redraw while the capture runs) or other
        programs had the CPU: the clock time alone made a toggle look dearer than a full forward."""
        text = f"forward {ms:.1f} ms"
        notes = []
        if compute_ms is not None and ms > 1.5 * compute_ms + 5:
            text = f"forward {compute_ms:.1f} ms, {ms:.0f} ms on the clock"
        if first_layer and first_layer >= n_layer:
            notes.append("all layers cached")
        elif first_layer == 1:
            notes.append("layer 0 cached")
        elif first_layer:
            notes.append(f"layers 0\u2013{first_layer - 1} cached")
        self.forward_label.setText(text + (f" ({'; '.join(notes)})" if notes else ""))
        tip = "clock time of the last forward pass on the worker thread"
        if compute_ms is not None:
            tip = (f"last forward pass: {compute_ms:.1f} ms of the worker thread's own CPU time, {ms:.1f} ms on the "
                   f"clock; the difference is time spent waiting while the window redrew its views (they share "
                   f"Python's interpreter lock) or other programs used the CPU")
        self.forward_label.setToolTip(tip)

    def set_busy(self, busy: bool) -> None:
        if busy:
            if not self.progress.isVisible():
                self._busy_timer.start()
        else:
            self._busy_timer.stop()
            self.progress.hide()
            self.cancel_button.hide()
            self._progress_kind = None
            if self._progress_text and self.currentMessage() == self._progress_text:
                self.clearMessage()  # "computing…" is over; other messages keep their own timeout
            self._progress_text = ""

    def _show_busy(self) -> None:
        self.progress.setRange(0, 0)  # indeterminate until a handler reports numbers
        self.progress.show()

    def show_progress(self, progress) -> None:
        if progress.text:
            self.showMessage(progress.text, 5000)
            self._progress_text = progress.text
        self._progress_kind = progress.request.kind
        if progress.total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(1.0, progress.done / progress.total)))
            self.progress.show()
            self.cancel_button.show()

    def _cancel(self) -> None:
        self.window_.worker.cancel(self._progress_kind)
