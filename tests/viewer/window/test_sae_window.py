"""Sparse autoencoders in the window: File > Open SAE attaches one (its info line shown), the
features panel lists the selected token's top features as model/sae computes them, a clamp
changes the next-token panel's prediction as the model does under it and removing it restores
the prediction exactly, a hostile SAE file is one line with the window unchanged, and `--sae`
on the command line attaches an SAE to the window's model."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_float32_close, assert_probs_close, largest_logit, model_reduction
from tests.helpers.window import PROMPT, TINY, new_window, reference_session, wait_idle
from transformer_viewer.viewer.worker.sae import FEATURES_TOP

HOOK = "blocks.0.hook_resid_post"
D_SAE = 64


@pytest.fixture(scope="module")
def sae_folder(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("sae") / "tiny_sae"
    weights = random_weights("standard", TINY["n_embd"], D_SAE, seed=3)
    weights["W_enc"] *= 4.0  # most tokens fire several features
    return write_saelens(folder, saelens_cfg("standard", TINY["n_embd"], D_SAE, HOOK), weights)


def opened(qtbot, window, folder: str):
    """Open `folder` as an SAE through the window and wait for it to be attached."""
    n = len(window.state.saes.attached)
    assert window.sae_menu.open(folder) is not None
    wait_idle(qtbot, window, lambda: len(window.state.saes.attached) == n + 1 or window.last_error)
    assert window.last_error is None
    return window.state.saes.attached[-1]


def reference(ckpt: str, folder: str):
    """A plain session on the prompt with the same SAE attached (index 0)."""
    from transformer_viewer.model.sae.loading import load_sae

    session = reference_session(ckpt)
    assert session.attach_sae(load_sae(folder, session.config)) == 0
    return session


def close(actual, expected, what: str) -> None:
    """The window's worker (its weights packed for oneDNN's GEMM) against a plain session: the
    float32 rule through the tiny model's layers and the SAE."""
    from transformer_viewer.model.decoder.config import GPTConfig

    assert_float32_close(actual, expected, reduction=max(model_reduction(GPTConfig(**TINY)), D_SAE),
                         depth=TINY["n_layer"] + 1, what=what)


def test_an_opened_sae_shows_its_info_line_and_the_tokens_top_features(qtbot, tmp_path, tiny_ckpt, sae_folder):
    from transformer_viewer.model.analysis.sae_features import token_features

    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        sae = opened(qtbot, w, sae_folder)
        assert sae.hook == HOOK and sae.d_sae == D_SAE and sae.info
        assert sae.info in w.status.currentMessage()
        panel = w.views["token-features"]
        assert panel.sae_box.currentText() == sae.title and panel.sae_box.itemData(0, 3) == sae.info  # tooltip
        ref = token_features(reference(tiny_ckpt, sae_folder), 0, top=FEATURES_TOP)
        for query in (None, 3):
            if query is not None:
                w.state.set_selection(query=query)
            q = w.state.query_index
            wait_idle(qtbot, w, lambda: panel.result is not None)
            rows = panel.rows()
            firing = [(int(i), float(a)) for i, a in zip(ref.ids[q], ref.acts[q], strict=True) if a > 0]
            firing.sort(key=lambda p: -p[1])
            assert rows and [f for f, _a in rows] == [f for f, _a in firing]
            close(np.array([a for _f, a in rows]), np.array([a for _f, a in firing]), f"activations at {q}")
            assert panel.table.rowCount() == len(rows)
            assert int(panel.table.item(0, 0).text()) == rows[0][0]
            assert f"position {q}" in panel.header.text()
    finally:
        w.close()


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


def test_a_hostile_sae_file_is_one_line_and_the_window_unchanged(qtbot, tmp_path, tiny_ckpt, sae_folder):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        kept = opened(qtbot, w, sae_folder)
        trace, intervention = w.state.trace, w.state.intervention
        lying = tmp_path / "lying_sae"
        cfg = saelens_cfg("standard", TINY["n_embd"], D_SAE * 2, HOOK)  # the weights hold D_SAE features
        write_saelens(lying, cfg, random_weights("standard", TINY["n_embd"], D_SAE))
        wrong_hook = tmp_path / "wrong_hook"
        write_saelens(wrong_hook, saelens_cfg("standard", TINY["n_embd"], D_SAE, "blocks.9.hook_resid_post"),
                      random_weights("standard", TINY["n_embd"], D_SAE))
        for bad in (lying, wrong_hook, tmp_path / "missing"):
            w.last_error = None
            w.sae_menu.open(str(bad))
            wait_idle(qtbot, w, lambda: w.last_error is not None)
            assert len(w.last_error.splitlines()) == 1 and "Traceback" not in w.last_error
            assert w.state.saes.attached == (kept,) and w.state.saes.sae == kept.index
            assert w.state.trace is trace and w.state.intervention == intervention
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
        w.show_view("attention")  # behind another tab: it colours the tokens no more
        assert st.token_overlay is None
    finally:
        w.close()


def test_sae_on_the_command_line_attaches_it(qapp, tmp_path, tiny_ckpt, sae_folder, monkeypatch, capsys):
    from transformer_viewer.viewer.cli import gui
    from transformer_viewer.viewer.cli.main import gui_parser

    seen = []

    class Watching(gui.Screenshot):
        def _shoot(self, error=None):
            seen.append(self.window.state.saes.attached)
            super()._shoot(error)

    monkeypatch.setattr(gui, "Screenshot", Watching)
    out = tmp_path / "shot.png"
    args = gui_parser().parse_args([tiny_ckpt, "--prompt", PROMPT, "--device", "cpu", "--sae", f"{sae_folder}@{HOOK}",
                                    "--screenshot", str(out)])
    assert args.sae == [f"{sae_folder}@{HOOK}"]
    assert gui.run(args) == 0 and os.path.exists(out)
    assert [s.hook for s in seen[-1]] == [HOOK]
    missing = tmp_path / "no_such_sae"
    args = gui_parser().parse_args([tiny_ckpt, "--prompt", PROMPT, "--device", "cpu", "--sae", str(missing),
                                    "--screenshot", str(tmp_path / "other.png")])
    capsys.readouterr()
    assert gui.run(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "no_such_sae" in err
    assert not (tmp_path / "other.png").exists()


def test_a_new_model_lets_the_old_sessions_saes_and_clamps_go(qtbot, tmp_path, tiny_ckpt, other_ckpt, sae_folder):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        opened(qtbot, w, sae_folder)
        w.state.saes.set_feature(1)
        w.views["token-features"].clamp_controls.clamp()
        wait_idle(qtbot, w, lambda: bool(w.state.trace.intervention.clamps))
        w.load(other_ckpt, device="cpu")
        wait_idle(qtbot, w, lambda: w.state.model_info.n_layer == 3 and w.state.trace is not None)
        assert w.state.saes.attached == () and w.state.clamps == () and w.state.trace.intervention.is_empty
        assert w.views["token-features"].header.text().startswith("No SAE open")
    finally:
        w.close()


def test_the_bundled_model_opens_with_its_sae_and_labels(qtbot, tmp_path):
    """On first launch the feature views work: the bundled model comes with its SAE attached
    and its labels read, and the panel lists the selected token's features."""
    from transformer_viewer.model.analysis.sae_features import token_features
    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.sae.labels import read_feature_labels
    from transformer_viewer.model.sae.loading import load_sae
    from transformer_viewer.viewer.window.sae_menu import bundled_sae

    found = bundled_sae()
    if found is None:
        pytest.skip("the bundled SAE is not installed")
    folder, labels = found
    w = new_window(qtbot, tmp_path, None, prompt=PROMPT)
    try:
        w.load(None, device="cpu")
        panel = w.views["token-features"]
        wait_idle(qtbot, w, lambda: w.state.saes.attached and panel.result is not None)
        (sae,) = w.state.saes.attached
        assert os.path.samefile(sae.source, folder) and not panel.bundled_button.isVisible()
        ref = Session(load_checkpoint(None, device="cpu"))
        ref.set_prompt(PROMPT)
        ref.attach_sae(load_sae(folder, ref.config))
        want = token_features(ref, 0, top=FEATURES_TOP)
        q = w.state.query_index
        assert [f for f, _a in panel.rows()] == [int(i) for i, a in sorted(
            zip(want.ids[q], want.acts[q], strict=True), key=lambda p: -p[1]) if a > 0]
        if labels is not None:
            read = read_feature_labels(labels, sae.d_sae)
            assert read and all(w.state.saes.label(sae.index, f) == text for f, text in read.items())
    finally:
        w.close()


def test_an_sae_before_a_model_and_labels_before_an_sae_are_one_line_each(qtbot, tmp_path):
    w = new_window(qtbot, tmp_path, None, prompt=None)
    try:
        assert w.sae_menu.open(str(tmp_path / "sae")) is None
        assert w.last_error == "open a model first: an SAE reads one of its layers"
        assert w.sae_menu.open_labels(str(tmp_path / "labels.csv")) is None
        assert w.last_error == "open an SAE first (File > Open SAE\u2026): labels name its features"
        assert w.state.saes.attached == ()
    finally:
        w.close()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_attached_saes_and_clamps_move_to_the_gpu_with_the_model(qtbot, tmp_path, tiny_ckpt, sae_folder):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        opened(qtbot, w, sae_folder)
        panel, st = w.views["token-features"], w.state
        wait_idle(qtbot, w, lambda: panel.result is not None)
        st.saes.set_feature(panel.rows()[0][0])
        panel.clamp_controls.set_choice("scale", 3.0)
        clamp = panel.clamp_controls.clamp()
        wait_idle(qtbot, w, lambda: st.trace.intervention.clamps == (clamp,) and panel.result is not None
                  and panel.key() == panel._key)
        on_cpu, rows_cpu = st.trace.next.probs.copy(), panel.rows()
        w.set_device("cuda")
        wait_idle(qtbot, w, lambda: st.model_info.device.startswith("cuda"))
        st.set_prompt(PROMPT + " sat")  # a new run on the GPU, clamp and all
        wait_idle(qtbot, w, lambda: st.trace.text == PROMPT + " sat" and panel.key() == panel._key)
        st.set_prompt(PROMPT)
        wait_idle(qtbot, w, lambda: st.trace.text == PROMPT and panel.key() == panel._key)
        assert w.last_error is None and st.trace.intervention.clamps == (clamp,)
        ref = reference_session(tiny_ckpt)
        assert_probs_close(st.trace.next.probs, on_cpu, logit_scale=largest_logit(ref.model, ref.tokens.ids),
                           reduction=max(model_reduction(ref.config), D_SAE), depth=TINY["n_layer"] + 1,
                           what="the clamped prediction on CUDA")
        assert [f for f, _a in panel.rows()] == [f for f, _a in rows_cpu]
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


def test_a_cancelled_sae_load_attaches_nothing(qtbot, tmp_path, tiny_ckpt, sae_folder):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        w.worker.submit(_slow_request())  # keeps the worker busy so the SAE load waits its turn
        handle = w.sae_menu.open(sae_folder)
        handle.cancel()
        wait_idle(qtbot, w)
        assert w.state.saes.attached == () and w.last_error is None
        assert "cancelled" in w.status.currentMessage()
    finally:
        w.close()


def _slow_request():
    from transformer_viewer.viewer.worker.requests import TraceRequest

    return TraceRequest(text=PROMPT * 3)


def test_open_sae_asks_a_params_npz_for_its_hook_point(qtbot, tmp_path, tiny_ckpt, monkeypatch):
    """File > Open SAE…: a Gemma Scope params.npz holds weights alone; the dialog's hook point
    says where it reads. Without one it is one line, nothing attached."""
    from tests.helpers.saes import write_npz
    from transformer_viewer.viewer.window import sae_menu

    npz = write_npz(tmp_path / "layer_1" / "params.npz", random_weights("jumprelu", TINY["n_embd"], D_SAE, seed=5))
    answers = iter([(npz, "blocks.1.hook_resid_post"), (npz, "")])

    def accepted(dialog):
        path, hook = next(answers)
        dialog.path.setText(path)
        dialog.hook.setText(hook)
        return sae_menu.QDialog.Accepted

    monkeypatch.setattr(sae_menu.OpenSaeDialog, "exec", accepted)
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        w.sae_menu.open_action.trigger()
        wait_idle(qtbot, w, lambda: w.state.saes.attached or w.last_error)
        (sae,) = w.state.saes.attached
        assert (sae.hook, sae.architecture, sae.d_sae) == ("blocks.1.hook_resid_post", "jumprelu", D_SAE)
        w.sae_menu.open_action.trigger()
        wait_idle(qtbot, w, lambda: w.last_error is not None)
        assert len(w.last_error.splitlines()) == 1 and "hook" in w.last_error
        assert w.state.saes.attached == (sae,)
    finally:
        w.close()


def test_two_saes_at_once_each_on_its_hook(qtbot, tmp_path, tiny_ckpt, sae_folder):
    from transformer_viewer.model.analysis.sae_features import token_features
    from transformer_viewer.model.sae.loading import load_sae

    later = write_saelens(tmp_path / "later", saelens_cfg("topk", TINY["n_embd"], 48, "blocks.1.hook_resid_post", k=6),
                          random_weights("topk", TINY["n_embd"], 48, seed=9))
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        w.sae_menu.open(sae_folder)
        w.sae_menu.open(later)  # asked while the first still loads: neither cancels the other
        wait_idle(qtbot, w, lambda: len(w.state.saes.attached) == 2)
        assert w.last_error is None
        assert sorted(s.hook for s in w.state.saes.attached) == [HOOK, "blocks.1.hook_resid_post"]
        panel = w.views["token-features"]
        assert panel.sae_box.count() == 2
        ref = reference(tiny_ckpt, sae_folder)
        ref.attach_sae(load_sae(later, ref.config))
        q = w.state.query_index
        for sae in w.state.saes.attached:
            panel.sae_box.setCurrentIndex(panel.sae_box.findData(sae.index))
            wait_idle(qtbot, w, lambda s=sae: panel.result is not None and panel.result.sae_index == s.index)
            want = token_features(ref, 0 if sae.hook == HOOK else 1, top=FEATURES_TOP)
            assert [f for f, _a in panel.rows()] == [int(i) for i, a in sorted(
                zip(want.ids[q], want.acts[q], strict=True), key=lambda p: -p[1]) if a > 0]
        assert w.state.saes.attached[-1].architecture == "topk"
        assert 0 < len(panel.rows()) <= 6  # the TopK SAE, shown last, fires at most k features
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
