"""Sparse autoencoders in the window: File > Open SAE attaches one (its info line shown; a
params.npz at the hook point asked for; several at once, each on its hook), the features panel
lists the selected token's top features as model/sae computes them, a hostile SAE file is one
line with the window unchanged, a cancelled load attaches nothing, `--sae` on the command line
attaches an SAE to the window's model, a new model lets the old SAEs and clamps go, and the
bundled model opens with its own SAE."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.sae_window import D_SAE, HOOK, close, opened, reference
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_probs_close, largest_logit, model_reduction
from tests.helpers.window import PROMPT, TINY, new_window, reference_session, wait_idle
from transformer_viewer.viewer.worker.sae import FEATURES_TOP


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
