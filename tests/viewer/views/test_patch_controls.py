"""The patching view's metric picker and controls: what they build (a PatchMetric, the setup's
kind, direction and normalisation), tokens typed, picked from the next-token panel's context
menu, or refused in one line."""

from __future__ import annotations

import pytest

from tests.helpers.window import new_window
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer

CLEAN = "When Mary and John went to the store, John gave a drink to"


def _id(text: str) -> int:
    (i,) = Tokenizer().encode(text)
    return i


def test_the_picker_builds_the_metric_the_user_chose(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt, prompt=CLEAN)
    try:
        controls = w.views["patching"].controls
        st = w.state
        n_vocab = st.model_info.vocab_size
        controls.token_a.setEditText(" Mary")
        controls.token_b.setEditText(" John")
        controls.apply_metric()
        assert st.patching.metric_value(n_vocab) == PatchMetric.make("logit-diff", (_id(" Mary"), _id(" John")))
        controls.position.setValue(5)
        assert st.patching.metric_value(n_vocab) == PatchMetric.make("logit-diff", (_id(" Mary"), _id(" John")), 5)
        controls.position.setValue(-1)  # "last"
        assert st.patching.position is None
        controls.metric.setCurrentIndex(controls.metric.findData("logprob"))
        assert not controls.token_b.isVisibleTo(controls) and controls.token_a.isVisibleTo(controls)
        assert st.patching.metric_value(n_vocab) == PatchMetric.make("logprob", (_id(" Mary"),))
        controls.metric.setCurrentIndex(controls.metric.findData("kl"))
        assert not controls.token_a.isVisibleTo(controls)
        assert st.patching.metric_value(n_vocab) == PatchMetric.make("kl")
        controls.direction.setCurrentIndex(controls.direction.findData("noise"))
        controls.normalised.setChecked(False)
        controls.what.setCurrentIndex(controls.what.findData("heads-by-pos"))
        assert (st.patching.direction, st.patching.normalised, st.patching.what) == ("noise", False, "heads-by-pos")
        assert controls.layer.isVisibleTo(controls) and not controls.input.isVisibleTo(controls)
        controls.layer.setValue(1)
        assert st.patching.layer == 1
    finally:
        w.close()


def test_a_bad_token_is_one_line_and_a_missing_one_is_asked_for(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt, prompt=CLEAN)
    try:
        controls = w.views["patching"].controls
        controls.token_a.setEditText(" Mary had")  # two tokens
        controls.apply_metric()
        assert controls.error.isVisibleTo(controls)
        assert "not one" in controls.error.text() and "\n" not in controls.error.text()
        controls.token_a.setEditText(" Mary")
        controls.apply_metric()
        assert not controls.error.isVisibleTo(controls)
        assert w.state.patching.tokens == (_id(" Mary"),)
        with pytest.raises(ModelError, match="choose tokens A and B"):
            w.state.patching.metric_value()
    finally:
        w.close()


def test_the_next_token_panel_sets_token_a_and_b(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt, prompt=CLEAN)
    try:
        panel, controls, st = w.logits, w.views["patching"].controls, w.state
        top = [int(i) for i in st.clean_trace.next.top_ids[:3]]
        panel.use_as_token(top[2], 1)  # B first: A becomes the baseline's top token
        assert st.patching.tokens == (top[0], top[2])
        panel.use_as_token(top[1], 0)
        assert st.patching.tokens == (top[1], top[2])
        assert controls.token_a.spec() == top[1] and controls.token_b.spec() == top[2]
        assert st.patching.metric_value() == PatchMetric.make("logit-diff", (top[1], top[2]))
    finally:
        w.close()
