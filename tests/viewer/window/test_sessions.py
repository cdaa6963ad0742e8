"""Saved sessions in the window: a session saved, the window closed, and the session reopened in
a new window restores every part field by field and the same trace; a changed checkpoint still
opens, saying so; a missing one keeps the session until a checkpoint is picked; every hostile
file is one line and leaves the open window as it was."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.helpers.sessions import hostile_sessions
from tests.helpers.window import PROMPT, make_checkpoint, mask_of, new_window, wait_idle
from transformer_viewer.viewer.views.export_options import FigureOptions
from transformer_viewer.viewer.window.session_binding import capture

COMPARED = ("checkpoint", "prompt", "intervention", "selection", "views", "environment", "figures", "patching")


def _restored(w):
    return lambda: (w.state.trace is not None and w.sessions.pending is None and w.sessions.after_trace is None
                    and w.views["routes"].result is not None)


def _set_everything(qtbot, w):
    """Move every setting a session keeps away from its default."""
    st = w.state
    st.set_ablation("mean")
    st.set_mask(mask_of(w, (0, 1), (1, 3)))
    wait_idle(qtbot, w, lambda: st.trace is not None and st.trace.intervention == st.intervention)
    st.set_selection(layer=1, head=2, query=3)
    st.set_neuron(5)
    att = w.views["attention"]
    att.set_mode("layer-mean")
    att.set_colormap("magma")
    att.set_log_scale(True)
    att.heatmap.set_visible_tokens((1, 5), (0, 4))
    w.show_view("rollout")
    w.views["rollout"].set_options(layers=(0, 2), heads=((0, 1), (1, 2)), residual=False)
    w.show_view("attribution")
    w.views["attribution"].set_tokens(262, 11)
    w.figure_options = FigureOptions("dark", 150.0)
    st.set_patching(comparing=True, corrupted="The dog sat on the mat. The dog", metric="logprob", tokens=(262,),
                    position=4, direction="noise", what="heads-by-pos", layer=1, receiver=(1, 2), input="k",
                    normalised=False)
    w.docks["grid"].hide()
    routes = w.views["routes"]
    w.show_view("routes")
    routes.renormalize.setChecked(True)
    routes.set_threshold(0.1)
    wait_idle(qtbot, w, lambda: routes.result is not None)
    routes.position = 2
    routes.request()
    wait_idle(qtbot, w, lambda: routes.result is not None and routes.result.position == 2)


def _same_trace(a, b):
    assert a.text == b.text and a.intervention == b.intervention
    for name in ("token_ids", "overview_max", "resid_norms", "head_norms"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.next.probs.tobytes() == b.next.probs.tobytes()


def test_a_reopened_session_restores_every_field_and_the_same_trace(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path / "a", tiny_ckpt)
    _set_everything(qtbot, w)
    saved = capture(w)
    trace = w.state.trace
    path = w.sessions.save(str(tmp_path / "s.tvsession"))
    assert path is not None and w.settings.value("recent_sessions")[0] == path
    w.close()

    w2 = new_window(qtbot, tmp_path / "b", None, prompt=None)
    assert w2.sessions.open(path)
    wait_idle(qtbot, w2, _restored(w2))
    restored = capture(w2)
    for part in COMPARED:
        assert restored[part] == saved[part], part
    assert saved["selection"].zoom["attention"] == ((1, 5), (0, 4))
    assert saved["views"].hidden == ("grid",) and saved["views"].front_tab == "routes"
    assert saved["patching"].corrupted == "The dog sat on the mat. The dog" and saved["patching"].input == "k"
    assert not [n for n in w2.sessions.notes if "layout" in n or "geometry" in n]
    _same_trace(w2.state.trace, trace)
    w2.close()


def test_a_changed_checkpoint_opens_saying_its_numbers_may_differ(qtbot, tmp_path):
    ckpt = make_checkpoint(tmp_path / "m.safetensors")
    w = new_window(qtbot, tmp_path / "a", ckpt)
    w.state.set_mask(mask_of(w, (1, 0)))
    wait_idle(qtbot, w, lambda: w.state.trace.intervention == w.state.intervention)
    path = w.sessions.save(str(tmp_path / "s.tvsession"))
    w.close()
    make_checkpoint(tmp_path / "m.safetensors", seed=7)  # same shape, other weights, same path

    w2 = new_window(qtbot, tmp_path / "b", None, prompt=None)
    w2.sessions.open(path)
    wait_idle(qtbot, w2, lambda: w2.state.trace is not None and w2.sessions.after_trace is None)
    assert "differs from the session's" in w2.last_error and "\n" not in w2.last_error
    assert w2.state.prompt == PROMPT and w2.state.mask[1, 0] and w2.state.mask.sum() == 1
    w2.close()


def test_a_missing_checkpoint_keeps_the_session_for_the_one_picked(qtbot, tmp_path):
    ckpt = make_checkpoint(tmp_path / "m.safetensors")
    w = new_window(qtbot, tmp_path / "a", ckpt)
    w.state.set_selection(layer=1, head=3)
    path = w.sessions.save(str(tmp_path / "s.tvsession"))
    w.close()
    moved = str(tmp_path / "moved.safetensors")
    shutil.move(ckpt, moved)

    w2 = new_window(qtbot, tmp_path / "b", None, prompt=None)
    assert w2.sessions.open(path)
    assert "not on this machine" in w2.last_error and "\n" not in w2.last_error
    assert "Pick checkpoint…" in [b.text() for b in w2.sessions.missing_box.buttons()]
    assert w2.sessions.pending is not None and w2.state.model_info is None
    w2.load(moved, device="cpu")  # what picking the checkpoint does
    wait_idle(qtbot, w2, lambda: w2.state.trace is not None and w2.sessions.after_trace is None)
    assert (w2.state.prompt, w2.state.layer, w2.state.head) == (PROMPT, 1, 3)
    w2.close()


@pytest.mark.parametrize("name", ["zip-slip", "symlink", "duplicate", "zip-bomb", "object-npy", "newer-version",
                                  "wrong-type", "huge-number", "mask-out-of-model", "bad-window-base64"])
def test_a_hostile_session_is_one_line_and_changes_nothing(qtbot, tmp_path, tiny_ckpt, name):
    data, expect = hostile_sessions()[name]
    bad = tmp_path / f"{name}.tvsession"
    bad.write_bytes(data)
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    before = capture(w)
    assert not w.sessions.open(str(bad))
    assert expect in w.last_error and "\n" not in w.last_error
    after = capture(w)
    for part in COMPARED:
        assert after.get(part) == before.get(part), part
    assert w.settings.value("recent_sessions") is None  # a refused file is not remembered
    w.close()


def test_a_window_layout_qt_refuses_is_dropped_with_a_note(qtbot, tmp_path, tiny_ckpt):
    from dataclasses import replace

    from transformer_viewer.model.sessions.registry import save

    w = new_window(qtbot, tmp_path, tiny_ckpt)
    records = capture(w)
    records["window"] = replace(records["window"], state=b"\x00\x00\x00\xff" + b"\x7f" * 64)
    path = save(str(tmp_path / "s.tvsession"), records)
    assert w.sessions.open(path)
    assert any("dock layout was not valid and was dropped" in n for n in w.sessions.notes)
    w.close()


def test_an_export_is_listed_in_the_saved_session_with_its_manifest(qtbot, tmp_path, tiny_ckpt):
    from transformer_viewer.model.sessions.figure_manifest import read_manifest
    from transformer_viewer.model.sessions.registry import load
    from transformer_viewer.viewer.window.actions import export

    w = new_window(qtbot, tmp_path, tiny_ckpt)
    png = export(w, "heatmap", str(tmp_path / "att.png"), manifest=True)
    npy = export(w, "heatmap", str(tmp_path / "att.npy"), manifest=False)
    path = w.sessions.save(str(tmp_path / "s.tvsession"))
    figures = load(path)[0]["figures"]
    assert [(f.path, f.view) for f in figures] == [(png, "attention"), (npy, "attention")]
    assert figures[0].manifest == png + ".manifest.json" and figures[1].manifest is None
    records, _notes = read_manifest(figures[0].manifest)
    assert records["prompt"].text == PROMPT and records["export"].layer == w.state.layer
    w.close()


def test_another_machine_is_noted_with_the_tolerance_to_expect(qtbot, tmp_path, tiny_ckpt):
    from dataclasses import replace

    from transformer_viewer.model.sessions.registry import load, save

    w = new_window(qtbot, tmp_path, tiny_ckpt)
    records = load(w.sessions.save(str(tmp_path / "here.tvsession")))[0]
    assert w.sessions.open(str(tmp_path / "here.tvsession"))
    assert not [n for n in w.sessions.notes if "computed elsewhere" in n]  # the same machine: nothing to say
    env = records["environment"]
    records["environment"] = replace(env, cpu="Another CPU", kernel_path="torch GEMM, ATen DEFAULT")
    assert w.sessions.open(save(str(tmp_path / "there.tvsession"), records))
    note = next(n for n in w.sessions.notes if "computed elsewhere" in n)
    assert "CPU Another CPU there" in note and "kernel path torch GEMM, ATen DEFAULT there" in note
    assert "of their size, not bit for bit" in note and "\n" not in note
    w.close()


def test_with_arrays_the_size_said_first_is_the_size_written(qtbot, tmp_path, tiny_ckpt):
    from transformer_viewer.model.sessions.registry import load

    w = new_window(qtbot, tmp_path, tiny_ckpt)
    size = w.sessions.size_with_arrays()
    path = w.sessions.save(str(tmp_path / "a.tvsession"), with_arrays=True)
    assert size == (tmp_path / "a.tvsession").stat().st_size
    arrays = load(path)[1]
    assert arrays["next-probs"].tobytes() == w.state.trace.next.probs.tobytes()
    assert np.array_equal(arrays["token-ids"], w.state.trace.token_ids)
    w.close()


def test_a_session_that_cannot_be_written_is_one_line_and_keeps_the_old_file(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    assert w.sessions.save(str(tmp_path / "no-such-folder" / "s.tvsession")) is None
    assert "the session could not be saved" in w.last_error and "\n" not in w.last_error
    kept = tmp_path / "kept.tvsession"
    kept.write_bytes(b"the user's own file")
    kept.chmod(0o444)
    assert w.sessions.save(str(kept)) is None
    assert kept.read_bytes() == b"the user's own file"
    w.close()
