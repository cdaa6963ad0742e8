"""Sessions with sparse autoencoders: an SAE with a clamp, its labels file, the selected feature
and the features panel's settings saved, the window closed, and the session reopened in a new
window opens the SAE again, restores every field and gives the same prediction; a missing SAE
is one line that keeps the rest of the session and names the clamps it drops, as is a changed
SAE (still opened) and a path that is no SAE."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest

from tests.helpers.sae_window import D_SAE, HOOK, opened
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.window import PROMPT, TINY, mask_of, new_window, wait_idle
from transformer_viewer.viewer.window.session_binding import capture


def _clamped_session(qtbot, tmp_path, ckpt, folder):
    """A window with `folder` open as SAE 0, labelled, feature 5 clamped at every token, head 1.0
    masked, BOS listed and 7 features per token; its session saved. (path, captured records, trace)"""
    labels = tmp_path / "labels.csv"
    labels.write_text("id,label\n5,five\n9,nine\n")
    w = new_window(qtbot, tmp_path / "a", ckpt)
    st = w.state
    opened(qtbot, w, folder)
    assert w.sae_menu.open_labels(str(labels)) is not None
    wait_idle(qtbot, w, lambda: st.saes.has_labels(0))
    st.set_mask(mask_of(w, (1, 0)))
    st.saes.set_feature(5)
    st.saes.set_show_bos(True)
    st.saes.set_top(7)
    controls = w.views["token-features"].clamp_controls
    controls.set_choice("scale", 3.0)
    clamp = controls.clamp()
    wait_idle(qtbot, w, lambda: st.trace.intervention.clamps == (clamp,) and st.trace.intervention.mask[1, 0])
    saved, trace = capture(w), st.trace
    path = w.sessions.save(str(tmp_path / "s.tvsession"))
    w.close()
    return path, saved, trace


def test_a_reopened_session_opens_its_sae_with_its_clamp_and_predicts_the_same(qtbot, tmp_path, tiny_ckpt,
                                                                                 sae_folder):
    path, saved, trace = _clamped_session(qtbot, tmp_path, tiny_ckpt, sae_folder)
    assert saved["intervention"].clamps[0].kind == "scale" and saved["saes"].saes[0].labels.endswith("labels.csv")

    w2 = new_window(qtbot, tmp_path / "b", None, prompt=None)
    st = w2.state
    assert w2.sessions.open(path)
    wait_idle(qtbot, w2, lambda: not w2.sessions.saes.busy and st.trace is not None
              and st.trace.intervention.clamps == saved["intervention"].clamps)
    restored = capture(w2)
    assert restored["saes"] == saved["saes"] and restored["intervention"] == saved["intervention"]
    assert w2.last_error is None and st.saes.label(0, 9) == "nine"
    assert st.prompt == PROMPT and st.trace.intervention == trace.intervention
    assert st.trace.next.probs.tobytes() == trace.next.probs.tobytes()  # the same prediction, bit for bit
    panel = w2.views["token-features"]
    assert panel.top_box.value() == 7 and panel.bos_box.isChecked()
    w2.close()


def test_a_missing_sae_is_one_line_that_keeps_the_rest_and_names_its_clamps(qtbot, tmp_path, tiny_ckpt, sae_folder):
    folder = shutil.copytree(sae_folder, tmp_path / "sae_copy")
    path, saved, _trace = _clamped_session(qtbot, tmp_path, tiny_ckpt, str(folder))
    shutil.rmtree(folder)

    w2 = new_window(qtbot, tmp_path / "b", None, prompt=None)
    st = w2.state
    assert w2.sessions.open(path)
    wait_idle(qtbot, w2, lambda: not w2.sessions.saes.busy and st.trace is not None and w2.sessions.after_trace is None)
    line = w2.last_error
    assert line.startswith("SAE 0 of the session (") and "sae_copy" in line and "\n" not in line
    assert "the rest of the session is kept, without its clamps (SAE 0 #5 \u00d7 3 at every token)" in line
    assert st.prompt == PROMPT and st.mask[1, 0] and st.mask.sum() == 1  # the rest kept
    assert st.clamps == () and st.saes.attached == ()
    assert capture(w2)["selection"] == saved["selection"]
    w2.close()


def test_reopened_on_the_model_already_open_the_same_sae_is_used_again(qtbot, tmp_path, tiny_ckpt, sae_folder):
    path, saved, _trace = _clamped_session(qtbot, tmp_path, tiny_ckpt, sae_folder)
    w2 = new_window(qtbot, tmp_path / "b", tiny_ckpt)
    opened(qtbot, w2, sae_folder)
    assert w2.sessions.open(path)
    wait_idle(qtbot, w2, lambda: not w2.sessions.saes.busy
              and w2.state.trace.intervention.clamps == saved["intervention"].clamps)
    assert len(w2.state.saes.attached) == 1 and w2.last_error is None
    w2.close()


@pytest.mark.parametrize("how", ["changed", "not-an-sae"])
def test_a_changed_sae_or_a_path_that_is_no_sae_is_one_line_without_its_clamps(qtbot, tmp_path, tiny_ckpt, sae_folder,
                                                                               how):
    from transformer_viewer.model.sessions import registry

    folder = shutil.copytree(sae_folder, tmp_path / "sae_copy")
    path, _saved, _trace = _clamped_session(qtbot, tmp_path, tiny_ckpt, str(folder))
    if how == "changed":  # the same place and shape, other weights
        weights = random_weights("standard", TINY["n_embd"], D_SAE, seed=8)
        write_saelens(folder, saelens_cfg("standard", TINY["n_embd"], D_SAE, HOOK), weights)
    else:
        notes = tmp_path / "notes.txt"
        notes.write_text("not an SAE")
        records, _arrays, _notes = registry.load(path)
        sae = replace(records["saes"].saes[0], spec=str(notes))
        path = registry.save(path, {**records, "saes": replace(records["saes"], saes=(sae,))})

    w2 = new_window(qtbot, tmp_path / "b", None, prompt=None)
    st = w2.state
    assert w2.sessions.open(path)
    wait_idle(qtbot, w2, lambda: not w2.sessions.saes.busy and st.trace is not None and w2.sessions.after_trace is None)
    line = w2.last_error
    assert line.startswith("SAE 0 of the session (") and "\n" not in line
    assert line.endswith("without its clamps (SAE 0 #5 \u00d7 3 at every token)")
    if how == "changed":
        assert "its files differ from the session's (its fingerprint changed); it is open" in line
        assert len(st.saes.attached) == 1 and st.saes.feature == 5
    else:
        assert "not an SAE file" in line and st.saes.attached == ()
    assert st.clamps == () and st.mask[1, 0] and st.prompt == PROMPT
    w2.close()


def test_the_bundled_sae_is_saved_portably_and_reopened_once(qtbot, tmp_path):
    """The bundled SAE is saved as itself (no path of this install), and a session reopened on the
    bundled model opens it once, with its labels and its clamp, not a second time by default."""
    from transformer_viewer.viewer.window.sae_menu import bundled_sae

    if bundled_sae() is None:
        pytest.skip("the bundled SAE is not installed")
    w = new_window(qtbot, tmp_path / "a", None)
    st = w.state
    w.load(None, device="cpu")
    wait_idle(qtbot, w, lambda: len(st.saes.attached) == 1 and st.trace is not None)
    st.saes.set_feature(3)
    clamp = w.views["token-features"].clamp_controls.clamp()
    wait_idle(qtbot, w, lambda: st.trace.intervention.clamps == (clamp,))
    saved, probs, labelled = capture(w), st.trace.next.probs, st.saes.has_labels(0)
    assert saved["saes"].saes[0].spec is None and saved["saes"].saes[0].labels is None
    path = w.sessions.save(str(tmp_path / "s.tvsession"))
    w.close()

    w2 = new_window(qtbot, tmp_path / "b", None, prompt=None)
    assert w2.sessions.open(path)
    wait_idle(qtbot, w2, lambda: not w2.sessions.saes.busy and w2.state.trace is not None
              and w2.state.trace.intervention.clamps == (clamp,))
    assert capture(w2)["saes"] == saved["saes"] and len(w2.state.saes.attached) == 1
    assert w2.state.saes.has_labels(0) == labelled and w2.last_error is None
    assert w2.state.trace.next.probs.tobytes() == probs.tobytes()
    w2.close()


def test_a_labels_file_gone_bad_leaves_the_sae_open_with_its_clamp_and_a_note(qtbot, tmp_path, tiny_ckpt, sae_folder):
    path, saved, _trace = _clamped_session(qtbot, tmp_path, tiny_ckpt, sae_folder)
    (tmp_path / "labels.csv").write_text("id,label\nfive,5\n")  # no longer a feature id in the first column

    w2 = new_window(qtbot, tmp_path / "b", None, prompt=None)
    st = w2.state
    assert w2.sessions.open(path)
    wait_idle(qtbot, w2, lambda: not w2.sessions.saes.busy and st.trace is not None
              and st.trace.intervention.clamps == saved["intervention"].clamps)
    assert len(st.saes.attached) == 1 and not st.saes.has_labels(0) and w2.last_error is None
    assert any("labels file" in n and "not a feature id" in n and "unlabelled" in n for n in w2.sessions.notes)
    w2.close()
