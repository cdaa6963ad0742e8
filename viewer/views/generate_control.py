""""Continue": generate N tokens on the worker and append them to the prompt.

Greedy, or sampled with a temperature and optional top-k from a seed (the same seed gives the
same text), with or without the current head mask. The appended prompt then runs like typed
text, so every view covers the generated tokens. A prompt edited while the tokens are being
generated wins: the generation stops, and a continuation of the old prompt is never appended
to the new one (the user's text is never replaced).
"""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets


class GenerateControl(QtWidgets.QWidget):
    """The extended prompt becomes the state's prompt, which the window runs like typed text."""

    generated = QtCore.Signal(object)  # the model's Generation

    def __init__(self, state, worker=None, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.handle = None  # the running generation's RequestHandle
        self.n_spin = QtWidgets.QSpinBox()
        self.n_spin.setRange(1, 1024)
        self.n_spin.setValue(20)
        self.n_spin.setSuffix(" tokens")
        self.mode_combo = QtWidgets.QComboBox()
        self.mode_combo.addItem("greedy", "greedy")
        self.mode_combo.addItem("sample", "sample")
        self.mode_combo.currentIndexChanged.connect(self._update_enabled)
        self.temp_spin = QtWidgets.QDoubleSpinBox()
        self.temp_spin.setRange(0.05, 5.0)
        self.temp_spin.setSingleStep(0.1)
        self.temp_spin.setValue(1.0)
        self.temp_spin.setPrefix("T ")
        self.temp_spin.setToolTip("Sampling temperature")
        self.topk_spin = QtWidgets.QSpinBox()
        self.topk_spin.setRange(0, 50257)
        self.topk_spin.setValue(40)
        self.topk_spin.setPrefix("top-k ")
        self.topk_spin.setSpecialValueText("top-k off")
        self.topk_spin.setToolTip("Sample only from the k most likely tokens (0: all)")
        self.seed_spin = QtWidgets.QSpinBox()
        self.seed_spin.setRange(0, 2**31 - 1)
        self.seed_spin.setValue(0)
        self.seed_spin.setPrefix("seed ")
        self.seed_spin.setToolTip("The same seed gives the same continuation")
        self.mask_box = QtWidgets.QCheckBox("intervene")
        self.mask_box.setChecked(True)
        self.mask_box.setToolTip("Generate with the current head mask and feature clamps (steering), or without "
                                 "either (clean)")
        self.button = QtWidgets.QPushButton("Continue")
        self.button.setToolTip("Generate and append to the prompt")
        self.button.clicked.connect(self.start)
        self.stop_button = QtWidgets.QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.stop)
        self.info = QtWidgets.QLabel("")
        self.info.setWordWrap(True)
        self.info.setMinimumWidth(60)
        # Two short rows: it lives in a side column about 400 pixels wide.
        grid = QtWidgets.QGridLayout(self)
        grid.setContentsMargins(4, 2, 4, 2)
        grid.setHorizontalSpacing(4)
        grid.setVerticalSpacing(2)
        rows = ((self.button, self.n_spin, self.mode_combo), (self.temp_spin, self.topk_spin, self.seed_spin),
                (self.mask_box, self.stop_button))
        for r, widgets in enumerate(rows):
            for col, w in enumerate(widgets):
                grid.addWidget(w, r, col)
        grid.addWidget(self.info, 2, 2)
        grid.setRowStretch(3, 1)
        self._update_enabled()
        state.prompt_changed.connect(self._on_prompt_changed)

    def _update_enabled(self) -> None:
        sample = self.mode_combo.currentData() == "sample"
        for w in (self.temp_spin, self.topk_spin, self.seed_spin):
            w.setEnabled(sample)

    def request(self):
        """The GenerateRequest the controls describe."""
        from transformer_viewer.viewer.worker.generate import GenerateRequest

        st = self.state
        sample = self.mode_combo.currentData() == "sample"
        return GenerateRequest(
            text=st.prompt, n_tokens=self.n_spin.value(), temperature=self.temp_spin.value() if sample else 0.0,
            top_k=(self.topk_spin.value() or None) if sample else None, seed=self.seed_spin.value() if sample else None,
            intervention=st.intervention if self.mask_box.isChecked() else None)

    def start(self) -> None:
        if self.worker is None or self.state.model_info is None or not self.state.prompt:
            self.info.setText("type a prompt first")
            return
        self.button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.info.setText("generating…")
        self.handle = self.worker.submit(self.request(), on_result=self._on_result, on_failure=self._on_failed,
                                         on_progress=self._on_progress)

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()

    def _on_prompt_changed(self, text: str) -> None:
        """Edited while generating: the continuation would be of a prompt no longer there."""
        if self.handle is not None and text != self.handle.request.text:
            self.stop()

    @property
    def running(self) -> bool:
        return self.handle is not None

    def _done(self) -> None:
        self.handle = None
        self.button.setEnabled(True)
        self.stop_button.setEnabled(False)

    def _on_progress(self, p) -> None:
        if p.total:
            self.info.setText(f"generating {int(p.done)}/{int(p.total)}…")

    def _on_failed(self, failure) -> None:
        self._done()
        edited = self.state.prompt != failure.request.text
        self.info.setText(("stopped: the prompt was edited" if edited else "stopped") if failure.cancelled
                          else failure.message)

    def _on_result(self, answer) -> None:
        self._done()
        gen = answer.value
        if self.state.prompt != answer.request.text:  # finished just as the prompt was edited
            self.info.setText("not appended: the prompt was edited while generating")
            return
        self.generated.emit(gen)
        how = "greedy" if gen.greedy else f"T={gen.temperature:g}, top-k {gen.top_k or 'off'}, seed {gen.seed}"
        request = answer.request.intervention
        clamped = request is not None and bool(request.clamps)
        masked = " with the mask" if gen.mask.any() else ""
        masked += (" and the clamps" if masked else " with the clamps") if clamped else ""
        self.info.setText(f"+{len(gen.new_ids)} tokens ({how}{masked})" + (" — stopped" if gen.cancelled else ""))
        if len(gen.new_ids):
            self.state.set_prompt(answer.request.text + gen.new_text)
