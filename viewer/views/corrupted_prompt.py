"""The corrupted prompt, beside the (clean) prompt: a second prompt box, hidden until a comparison
is asked for (View > Compare with a corrupted prompt, or the patching view's button), with its
tokens as chips.

The tokens that differ from the clean prompt's are outlined here and in the token strip; when
the two prompts tokenize to different lengths one line says so and that patching by position
needs equal lengths. The text is tokenized here, on the GUI thread, by the loaded model's own
tokenizer (the worker's is the same object's twin, `ViewerState.tokenizer()`), a moment after
the last keystroke: the outline follows typing without asking the worker; the patching view
sends the text itself with its requests.
"""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from transformer_viewer.viewer.patch_setup import length_line
from transformer_viewer.viewer.views.chip_canvas import ChipCanvas

DEBOUNCE_MS = 250
MAX_CHARS = 200_000  # tokenized on the GUI thread: a paste past this is cut (the worker gets the whole text)


class CorruptedPrompt(QtWidgets.QWidget):
    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state = state
        self.edit = QtWidgets.QPlainTextEdit()
        self.edit.setPlaceholderText("The corrupted prompt: the clean one with what matters changed "
                                     "(e.g. the names swapped); activation patching compares the two")
        self.edit.setTabChangesFocus(True)
        self.edit.setMaximumHeight(3 * self.edit.fontMetrics().lineSpacing() + 12)
        self.close_button = QtWidgets.QToolButton(text="\u2715")
        self.close_button.setToolTip("Stop comparing (the corrupted prompt is kept)")
        self.close_button.clicked.connect(lambda: state.set_patching(comparing=False))
        self.canvas = ChipCanvas()
        self.canvas.tooltip_for = self._tooltip
        self.scroll = QtWidgets.QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(self.canvas)
        self.scroll.setMaximumHeight(64)
        self.lengths = QtWidgets.QLabel("")
        self.lengths.setWordWrap(True)
        self.lengths.hide()
        head = QtWidgets.QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(QtWidgets.QLabel("Corrupted prompt"))
        head.addStretch(1)
        head.addWidget(self.close_button)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(head)
        layout.addWidget(self.edit)
        layout.addWidget(self.scroll)
        layout.addWidget(self.lengths)
        self.timer = QtCore.QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(DEBOUNCE_MS)
        self.timer.timeout.connect(self.apply)
        self.edit.textChanged.connect(self.timer.start)
        state.patching_changed.connect(self.refresh)
        state.trace_changed.connect(lambda _t: self.refresh())
        state.model_changed.connect(lambda _i: self.retokenize())
        self._tokenized_for = None  # (text, tokenizer spec) the state's corrupted tokens are of
        self.refresh()

    def set_text(self, text: str) -> None:
        """Make `text` the corrupted prompt now (and show the box)."""
        self.edit.blockSignals(True)
        self.edit.setPlainText(text)
        self.edit.blockSignals(False)
        self.timer.stop()
        self.state.set_patching(comparing=True, corrupted=text)
        self.retokenize()

    def apply(self) -> None:
        """The box's text becomes the state's corrupted prompt, tokenized."""
        self.timer.stop()
        # A prompt typed here replaces a pairs file's pairs: the view patches this pair again.
        self.state.set_patching(corrupted=self.edit.toPlainText(), pairs=(), pairs_name="")
        self.retokenize()

    def retokenize(self) -> None:
        st = self.state
        text = st.patching.corrupted
        if st.model_info is None or not text:
            self._tokenized_for = None
            st.set_corrupted_tokens(None)
            return
        key = (text, st.model_info.tokenizer, st.model_info.block_size)
        if key == self._tokenized_for:
            return
        tok, _dropped = st.tokenizer().tokenize_last(text[-MAX_CHARS:], st.model_info.block_size)
        self._tokenized_for = key
        st.set_corrupted_tokens(tok)

    def refresh(self) -> None:
        st = self.state
        p = st.patching
        self.setVisible(p.comparing)
        if p.corrupted != self.edit.toPlainText() and not self.timer.isActive():
            self.edit.blockSignals(True)
            self.edit.setPlainText(p.corrupted)
            self.edit.blockSignals(False)
            self.retokenize()
        tokens = st.corrupted_tokens
        labels = tokens.labels if tokens is not None else ()
        if labels != self.canvas.labels:
            self.canvas.set_tokens(labels, tokens.special if tokens is not None else ())
        diff = st.patch_differences()
        self.canvas.set_marked(diff[1] if diff is not None else None)
        line = ""
        if st.trace is not None and tokens is not None:
            line = length_line(st.trace.n_tokens, len(tokens.ids))
            if not line and diff is not None:  # one length: say how many tokens differ
                n = int(diff[1].sum())
                line = (f"both prompts are {len(tokens.ids)} tokens; {n} differ{'s' if n == 1 else ''} (outlined)"
                        if n else f"both prompts are {len(tokens.ids)} tokens and the same: patching changes nothing")
        self.lengths.setStyleSheet("color: #a05a00" if line.startswith("the clean prompt") else "")
        self.lengths.setText(line)
        self.lengths.setVisible(bool(line))

    def _tooltip(self, i: int) -> str:
        tokens = self.state.corrupted_tokens
        if tokens is None or i >= len(tokens.ids):
            return ""
        diff = self.state.patch_differences()
        differs = diff is not None and i < len(diff[1]) and diff[1][i]
        return (f"{tokens.labels[i]!r}   id {tokens.ids[i]}   position {i}"
                + ("\ndiffers from the clean prompt" if differs else ""))
