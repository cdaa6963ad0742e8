"""The patching view's controls, bound to `ViewerState.patching` (viewer/patch_setup.py):

- the metric: its kind (logit difference of two tokens, one token's log-probability, KL from the
  clean distribution), its tokens (typed as text or id, picked from the candidates, or set from
  the next-token panel's right-click menu) and its position (the last by default);
- what is patched (one of the grid kinds), with the layer heads-by-pos shows and path
  patching's receiver head and input;
- the direction (denoise: clean into corrupted; noise: corrupted into clean) and whether the
  values are shown normalised (corrupted = 0, clean = 1) or raw.

Every change goes through `state.set_patching`; a bad token is said in `error`, one line.
"""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from transformer_viewer.model.analysis.patching.grid import WHAT_HELP, WHATS
from transformer_viewer.model.analysis.patching.metric import METRIC_HELP, METRICS
from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.patch_setup import INPUTS, TOKENS_NEEDED
from transformer_viewer.viewer.views.attribution_view import TokenChoice
from transformer_viewer.viewer.views.logits_panel import token_label

METRIC_NAMES = {"logit-diff": "logit difference A \u2212 B", "logprob": "log p(A)", "kl": "KL(clean \u2016 run)"}
DIRECTION_NAMES = {"denoise": "denoise: clean into corrupted", "noise": "noise: corrupted into clean"}


def _combo(items: dict[str, str], tips: dict[str, str] | None = None) -> QtWidgets.QComboBox:
    box = QtWidgets.QComboBox()
    for key, text in items.items():
        box.addItem(text, key)
        if tips:
            box.setItemData(box.count() - 1, tips[key], QtCore.Qt.ItemDataRole.ToolTipRole)
    return box


class PatchControls(QtWidgets.QWidget):
    """Two rows of controls: the metric, then what is patched and how it is shown."""

    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state = state
        self.metric = _combo(METRIC_NAMES, METRIC_HELP)
        self.metric.setToolTip("What a run is measured by, at the metric's position")
        self.token_a = TokenChoice("token A")
        self.token_b = TokenChoice("token B")
        self.token_a.setToolTip("Token A: text that is one token (often with its leading space), an id, a "
                                "candidate, or right-click a token in the next-token panel")
        self.token_b.setToolTip("Token B, subtracted: logit(A) \u2212 logit(B)")
        self.position = QtWidgets.QSpinBox()
        self.position.setRange(-1, 1 << 20)
        self.position.setSpecialValueText("last")
        self.position.setValue(-1)
        self.position.setToolTip("The position the metric is read at (last: the prompt's last token)")
        self.what = _combo({w: w for w in WHATS}, WHAT_HELP)
        self.what.setToolTip("What is patched: each cell of the grid is one patched run")
        self.layer = QtWidgets.QSpinBox()
        self.layer.setPrefix("layer ")
        self.layer.setToolTip("The layer whose heads are patched position by position")
        self.receiver_layer = QtWidgets.QSpinBox()
        self.receiver_layer.setPrefix("receiver L")
        self.receiver_head = QtWidgets.QSpinBox()
        self.receiver_head.setPrefix("H")
        self.input = _combo({i: f"input {i}" for i in INPUTS})
        for w in (self.receiver_layer, self.receiver_head, self.input):
            w.setToolTip("Path patching: the receiver head, and which of its inputs the senders are patched into")
        self.direction = _combo(DIRECTION_NAMES)
        self.direction.setToolTip("Denoise: write a clean activation into the corrupted run (how much of the "
                                  "clean answer it restores). Noise: a corrupted one into the clean run")
        self.normalised = QtWidgets.QCheckBox("normalised")
        self.normalised.setChecked(True)
        self.normalised.setToolTip("Show (patched \u2212 corrupted) / (clean \u2212 corrupted): corrupted = 0, "
                                   "clean = 1; unchecked: the metric itself")
        self.error = QtWidgets.QLabel("")
        self.error.setStyleSheet("color: #b00")
        self.error.hide()

        top = QtWidgets.QHBoxLayout()
        top.setContentsMargins(4, 0, 4, 0)
        for w in (QtWidgets.QLabel("Metric"), self.metric, self.token_a, QtWidgets.QLabel("\u2212"), self.token_b,
                  QtWidgets.QLabel("at"), self.position, self.error):
            top.addWidget(w)
        top.addStretch(1)
        self.minus_label = top.itemAt(3).widget()
        second = QtWidgets.QHBoxLayout()
        second.setContentsMargins(4, 0, 4, 0)
        for w in (QtWidgets.QLabel("Patch"), self.what, self.layer, self.receiver_layer, self.receiver_head,
                  self.input, self.direction, self.normalised):
            second.addWidget(w)
        second.addStretch(1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addLayout(second)

        self._syncing = False
        self.metric.currentIndexChanged.connect(lambda _i: self.apply_metric())
        for box in (self.token_a, self.token_b):
            box.activated.connect(lambda _i: self.apply_metric())
            box.lineEdit().editingFinished.connect(self.apply_metric)
        self.position.valueChanged.connect(lambda _v: self.apply_metric())
        self.what.currentIndexChanged.connect(lambda _i: self._set(what=self.what.currentData()))
        self.layer.valueChanged.connect(lambda v: self._set(layer=int(v)))
        self.receiver_layer.valueChanged.connect(lambda _v: self._set(receiver=self._receiver()))
        self.receiver_head.valueChanged.connect(lambda _v: self._set(receiver=self._receiver()))
        self.input.currentIndexChanged.connect(lambda _i: self._set(input=self.input.currentData()))
        self.direction.currentIndexChanged.connect(lambda _i: self._set(direction=self.direction.currentData()))
        self.normalised.toggled.connect(lambda on: self._set(normalised=bool(on)))
        state.patching_changed.connect(self.sync)
        state.model_changed.connect(lambda _i: self._forget_tokens())
        state.trace_changed.connect(self._fill_candidates)
        self.sync()

    # -- state -> controls ----------------------------------------------------------------
    def sync(self) -> None:
        """Show the state's setup (without sending it back)."""
        p, st = self.state.patching, self.state
        self._syncing = True
        try:
            self.metric.setCurrentIndex(METRICS.index(p.metric))
            need = TOKENS_NEEDED[p.metric]
            self.token_a.setVisible(need >= 1)
            self.token_b.setVisible(need >= 2)
            self.minus_label.setVisible(need >= 2)
            tok = st.tokenizer() if st.model_info is not None else None
            for i, box in enumerate((self.token_a, self.token_b)):
                if tok is not None and i < len(p.tokens) and box.spec() != p.tokens[i]:
                    if box.findData(p.tokens[i]) < 0:  # named by its label, not its id, beside the candidates
                        box.addItem(token_label(p.tokens[i], tok), p.tokens[i])
                    box.show_token(p.tokens[i], tok)
            self.position.setValue(-1 if p.position is None else p.position)
            self.what.setCurrentIndex(WHATS.index(p.what))
            for spin, top in ((self.layer, st.n_layer), (self.receiver_layer, st.n_layer),
                              (self.receiver_head, st.n_head)):
                spin.setMaximum(max(0, top - 1))
            self.layer.setValue(p.layer)
            self.receiver_layer.setValue(p.receiver[0])
            self.receiver_head.setValue(p.receiver[1])
            self.input.setCurrentIndex(INPUTS.index(p.input))
            self.layer.setVisible(p.what == "heads-by-pos")
            for w in (self.receiver_layer, self.receiver_head, self.input):
                w.setVisible(p.what == "path")
            self.direction.setCurrentIndex(list(DIRECTION_NAMES).index(p.direction))
            self.normalised.setChecked(p.normalised)
        finally:
            self._syncing = False

    def _forget_tokens(self) -> None:
        for box in (self.token_a, self.token_b):  # ids of another vocabulary
            box.setEditText("")
        self.sync()

    def _fill_candidates(self, trace) -> None:
        if trace is None or self.state.model_info is None:
            return
        tok = self.state.tokenizer()
        items = [(token_label(int(i), tok), int(i)) for i in trace.next.top_ids[:20]]
        for box in (self.token_a, self.token_b):
            box.set_candidates(items)
        self.sync()  # the chosen tokens stay listed under their labels

    # -- controls -> state ----------------------------------------------------------------
    def _receiver(self) -> tuple[int, int]:
        return int(self.receiver_layer.value()), int(self.receiver_head.value())

    def _set(self, **changes) -> None:
        if not self._syncing:
            self.state.set_patching(**changes)

    def set_token(self, which: int, spec) -> None:
        """Token A (0) or B (1) of the metric: an id, or text that is exactly one token."""
        box = (self.token_a, self.token_b)[which]
        tok = self.state.tokenizer()
        box.show_token(spec, tok)
        if which == 1 and self.state.patching.metric != "logit-diff":
            self.metric.setCurrentIndex(METRICS.index("logit-diff"))  # B only means something in a difference
        self.apply_metric()

    def apply_metric(self) -> None:
        """The metric's kind, tokens and position from the controls; a bad token is one line."""
        if self._syncing:
            return
        kind = self.metric.currentData()
        position = self.position.value()
        try:
            tokens = self.tokens_typed(TOKENS_NEEDED[kind])
        except ModelError as e:
            self.error.setText(str(e))
            self.error.show()
            return
        self.error.hide()
        self.state.set_patching(metric=kind, tokens=tokens, position=None if position < 0 else int(position))

    def tokens_typed(self, need: int) -> tuple[int, ...]:
        """The ids of the first `need` token boxes that hold a token (ModelError: one is not a token)."""
        from transformer_viewer.model.tokenizers.tokenizer import parse_token

        st = self.state
        if st.model_info is None:
            return ()
        tok = st.tokenizer()
        n_vocab = min(st.model_info.vocab_size or tok.n_vocab, tok.n_vocab)
        ids = []
        for box, name in ((self.token_a, "token A"), (self.token_b, "token B"))[:need]:
            spec = box.spec()
            t = parse_token(None if spec is None else str(spec), tok, n_vocab, name)
            if t is None:
                break
            ids.append(int(t))
        return tuple(ids)
