"""The SAE features panel and the feature view: a clamp changes the next-token panel's prediction
as the model does under it and removing it restores it exactly, at every token or one, with a
head mask, and Continue generates under it; labels name the listed features; the BOS token is
left out until asked for; the feature view draws a feature's row, logit effect, share and the
layer's overview; a closed panel asks the worker nothing until it is shown."""

from __future__ import annotations

import numpy as np

from tests.helpers.sae_window import D_SAE, close, opened, reference
from tests.helpers.tolerances import assert_probs_close, largest_logit, model_reduction
from tests.helpers.window import PROMPT, TINY, new_window, wait_idle
from transformer_viewer.viewer.worker.sae import FEATURES_TOP


def test_a_clamp_changes_the_prediction_and_removing_it_restores_it(qtbot, tmp_path, tiny_ckpt, sae_folder):
    from transformer_viewer.model.capture.interventions import Intervention

    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        opened(qtbot, w, sae_folder)
        panel, st = w.views["token-features"], w.state
        wait_idle(qtbot, w, lambda: panel.result is not None)
        before = w.logits.rows()
        before_probs = st.trace.next.probs.copy()
        feature = panel.rows()[0][0]
        panel.table.selectRow(0)  # a click on the panel's first feature selects it
        assert st.saes.feature == feature
        panel.clamp_controls.set_choice("set", 40.0)
        clamp = panel.clamp_controls.clamp()
        wait_idle(qtbot, w, lambda: st.trace.intervention.clamps == (clamp,))
        assert panel.clamp_list.list.count() == 1 and f"#{feature}" in panel.clamp_list.list.item(0).text()
        assert "1 feature clamped" in w.logits.summary.text()
        from transformer_viewer.viewer.figure import view_title

        assert view_title(st, "Attention").endswith(f"\u2014 clamp 0:{feature}=40")  # exported figures say so
        after = st.trace.next.probs
        assert not np.array_equal(after, before_probs)
        # What the panel shows is the model's own prediction under that clamp.
        ref = reference(tiny_ckpt, sae_folder)
        expected = ref.predict(Intervention.make(ref.config, None, "zero", clamps=(clamp,)), None, None, 10)
        assert_probs_close(after, expected.probs, logit_scale=largest_logit(ref.model, ref.tokens.ids),
                           reduction=max(model_reduction(ref.config), D_SAE), depth=TINY["n_layer"] + 1,
                           what="the clamped prediction")
        # A head mask joins the clamp; removing the clamp keeps the mask.
        st.toggle_head(1, 2)
        wait_idle(qtbot, w, lambda: st.trace.intervention.n_masked == 1)
        assert st.trace.intervention.clamps == (clamp,)
        panel.clamp_list.remove_selected()
        wait_idle(qtbot, w, lambda: not st.trace.intervention.clamps)
        assert st.trace.intervention.n_masked == 1
        st.toggle_head(1, 2)
        wait_idle(qtbot, w, lambda: st.trace.intervention.is_empty)
        assert w.logits.rows() == before
        np.testing.assert_array_equal(st.trace.next.probs, before_probs)
    finally:
        w.close()


def test_feature_labels_name_the_listed_features(qtbot, tmp_path, tiny_ckpt, sae_folder):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        opened(qtbot, w, sae_folder)
        panel = w.views["token-features"]
        wait_idle(qtbot, w, lambda: panel.result is not None)
        rows = panel.rows()
        labels = tmp_path / "labels.csv"
        labels.write_text("id,label\n" + "".join(f"{f},feature-{f}-says\n" for f, _a in rows))
        w.sae_menu.open_labels(str(labels))
        wait_idle(qtbot, w, lambda: w.state.saes.has_labels(0))
        assert [panel.table.item(r, 2).text() for r in range(len(rows))] == [f"feature-{f}-says" for f, _a in rows]
    finally:
        w.close()


def test_the_feature_view_draws_the_selected_features_row_effect_and_overview(qtbot, tmp_path, tiny_ckpt,
                                                                               sae_folder):
    from transformer_viewer.model.analysis.sae_features import feature_logit_effect, feature_row, sae_overview

    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        opened(qtbot, w, sae_folder)
        panel, st = w.views["token-features"], w.state
        wait_idle(qtbot, w, lambda: panel.result is not None)
        feature = panel.rows()[0][0]
        st.saes.set_feature(feature)
        view = w.views["features"]
        w.show_view("features")
        wait_idle(qtbot, w, lambda: view.result is not None and view.overview is not None)
        ref = reference(tiny_ckpt, sae_folder)
        row = feature_row(ref, 0, feature)
        close(view.result.row, row, "the feature's row")
        np.testing.assert_array_equal(st.token_overlay[0], np.maximum(view.shown_row(), 0))
        assert f"feature {feature}" in st.token_overlay[1]
        effect = feature_logit_effect(ref, 0, feature, top=10)
        promoted, suppressed = view.effect_rows()
        tok = st.tokenizer()
        assert promoted == [tok.label(int(i)) for i in effect.promoted_ids]
        assert suppressed == [tok.label(int(i)) for i in effect.suppressed_ids]
        assert "frozen" in view.effect_note.text() and "approximation" in view.effect_note.text()
        overview = sae_overview(ref, 0)
        np.testing.assert_array_equal(view.overview.l0, overview.l0)
        assert f"{float(overview.fvu):.3f}" in view.overview_text.text()
        other = (feature + 1) % D_SAE
        view.feature_box.setValue(other)  # a feature typed by its id
        wait_idle(qtbot, w, lambda: view.result.feature == other)
        assert st.saes.feature == other
        close(view.result.row, feature_row(ref, 0, other), "the typed feature's row")
        st.saes.set_feature(None)  # no feature, then the same one again: asked and drawn anew
        assert view.result is None
        st.saes.set_feature(other)
        wait_idle(qtbot, w, lambda: view.result is not None and view.result.feature == other)
        w.show_view("attention")  # behind another tab: it colours the tokens no more
        assert st.token_overlay is None
    finally:
        w.close()


def test_the_bos_token_is_left_out_until_asked_for(qtbot, tmp_path, tiny_ckpt, sae_folder):
    from transformer_viewer.model.analysis.sae_features import token_features

    prompt = "<|endoftext|>" + PROMPT  # GPT-2's special token first: the BOS position
    w = new_window(qtbot, tmp_path, tiny_ckpt, prompt=prompt)
    try:
        opened(qtbot, w, sae_folder)
        panel, st = w.views["token-features"], w.state
        st.set_selection(query=0)
        wait_idle(qtbot, w, lambda: panel.result is not None and st.query_index == 0)
        assert st.trace.special[0] and panel.rows() == [] and "BOS token, left out" in panel.header.text()
        panel.bos_box.setChecked(True)
        wait_idle(qtbot, w, lambda: panel.result is not None and not panel.result.bos_left_out)
        ref = reference(tiny_ckpt, sae_folder)
        ref.set_prompt(prompt)
        want = token_features(ref, 0, top=FEATURES_TOP, skip_bos=False)
        assert [f for f, _a in panel.rows()] == [int(i) for i, a in zip(want.ids[0], want.acts[0], strict=True) if a > 0]
        assert panel.rows()
    finally:
        w.close()


def test_a_closed_features_panel_asks_when_shown_again(qtbot, tmp_path, tiny_ckpt, sae_folder):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        opened(qtbot, w, sae_folder)
        panel, dock = w.views["token-features"], w.docks["token-features"]
        wait_idle(qtbot, w, lambda: panel.result is not None)
        dock.hide()
        w.state.set_prompt(PROMPT + " sat")
        wait_idle(qtbot, w, lambda: w.state.trace.text == PROMPT + " sat")
        assert panel.key() != panel._key and panel._pending is None  # nothing asked while closed
        dock.show()
        wait_idle(qtbot, w, lambda: panel.key() == panel._key)
        assert panel.result.ids.shape[0] == w.state.trace.n_tokens
    finally:
        w.close()


def test_continue_generates_with_the_clamps(qtbot, tmp_path, tiny_ckpt, sae_folder):
    """Steering: Continue runs under the state's Intervention, clamps included."""
    from transformer_viewer.model.analysis.generate import generate
    from transformer_viewer.model.capture.interventions import Intervention

    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        opened(qtbot, w, sae_folder)
        panel, st, control = w.views["token-features"], w.state, w.views["continue"]
        wait_idle(qtbot, w, lambda: panel.result is not None)
        st.saes.set_feature(panel.rows()[0][0])
        panel.clamp_controls.set_choice("set", 300.0)
        clamp = panel.clamp_controls.clamp()
        wait_idle(qtbot, w, lambda: st.trace.intervention.clamps == (clamp,))
        control.n_spin.setValue(5)
        control.start()
        wait_idle(qtbot, w, lambda: not control.running and st.prompt != PROMPT)
        ref = reference(tiny_ckpt, sae_folder)
        steered = generate(ref, 5, intervention=Intervention.make(ref.config, None, "zero", clamps=(clamp,)))
        assert st.prompt == PROMPT + steered.new_text
        assert steered.new_text != generate(ref, 5).new_text  # the clamp steers the continuation
        assert "with the clamps" in control.info.text()
    finally:
        w.close()


def test_a_clamp_at_the_selected_token_only(qtbot, tmp_path, tiny_ckpt, sae_folder):
    from transformer_viewer.model.capture.interventions import Intervention

    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        opened(qtbot, w, sae_folder)
        panel, st = w.views["token-features"], w.state
        st.set_selection(query=2)
        wait_idle(qtbot, w, lambda: panel.result is not None and st.query_index == 2)
        st.saes.set_feature(panel.rows()[0][0])
        panel.clamp_controls.set_choice("zero", here=True)
        clamp = panel.clamp_controls.clamp()
        assert (clamp.kind, clamp.value, clamp.position) == ("set", 0.0, 2)
        wait_idle(qtbot, w, lambda: st.trace.intervention.clamps == (clamp,))
        assert f"zeroed at 2 {st.trace.labels[2]!r}" in panel.clamp_list.list.item(0).text()
        ref = reference(tiny_ckpt, sae_folder)
        want = ref.predict(Intervention.make(ref.config, None, "zero", clamps=(clamp,)), None, 2, 10)
        assert list(st.trace.next.top_ids) == list(want.top_ids)
    finally:
        w.close()
