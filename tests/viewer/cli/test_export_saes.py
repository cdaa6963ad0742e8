"""`export --sae ... --clamp ...`: every exportable view is drawn from the run under the clamps,
as the session API computes it; its manifest records the SAEs, and `--from-manifest` reopens
them and regenerates the same file; a gone SAE is one line, a changed one a note, a private
manifest names none of their paths; `export --session` applies the session's clamps."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_float32_close, model_reduction
from tests.helpers.window import TINY, make_checkpoint
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.capture.on_demand import head_pattern
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.sae.loading import load_sae
from transformer_viewer.model.sessions import registry
from transformer_viewer.model.sessions.checkpoint_part import record_of
from transformer_viewer.model.sessions.fingerprint import sae_fingerprint
from transformer_viewer.model.sessions.prompt_part import InterventionRecord, PromptRecord
from transformer_viewer.model.sessions.saes_part import SaeRecord, SaesRecord
from transformer_viewer.viewer.views.registry import exportable

PROMPT = "When Mary and John went to the store, John gave a drink to"
HOOK = "blocks.0.hook_resid_post"  # before layer 1: its attention sees the clamps
D_SAE = 48
CLAMPS = (FeatureClamp(0, 5, "scale", 3.0), FeatureClamp(0, 9, "set", 2.5, 4))
TYPED_CLAMPS = ("--clamp", "5x3", "--clamp", "9=2.5@4")
HEAD = ("--layer", "1", "--head", "2")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("export-saes") / "tiny.safetensors")


def _sae(folder, seed: int = 4) -> str:
    weights = random_weights("standard", TINY["n_embd"], D_SAE, seed=seed)
    weights["W_enc"] *= 4.0  # several features fire at each token
    return write_saelens(folder, saelens_cfg("standard", TINY["n_embd"], D_SAE, HOOK), weights)


def _ok(capsys, *argv) -> str:
    rc, _out, err = cli(capsys, *argv)
    assert rc == 0, err
    return err


def _export(capsys, ckpt, out, *extra) -> str:
    return _ok(capsys, "export", ckpt, "--prompt", PROMPT, *HEAD, "--out", str(out), *extra)


def _clamped_session(ckpt, folder):
    session = Session(load_checkpoint(ckpt))
    session.set_prompt(PROMPT)
    session.attach_sae(load_sae(folder, session.config))
    return session, session.run(Intervention.make(session.config, None, clamps=CLAMPS))


def test_clamped_exports_are_the_runs_under_the_clamps(ckpt, tmp_path, capsys):
    folder = _sae(tmp_path / "sae")
    clamped = ("--sae", folder, *TYPED_CLAMPS)
    for view in sorted(exportable()):
        own = ("--corrupted", PROMPT.replace("John gave", "Mary gave"), "--metric", "kl") if view == "patching" else ()
        _export(capsys, ckpt, tmp_path / f"plain-{view}.npy", "--view", view, *own)
        err = _export(capsys, ckpt, tmp_path / f"clamped-{view}.npy", "--view", view, *clamped, *own)
        plain, under = np.load(tmp_path / f"plain-{view}.npy"), np.load(tmp_path / f"clamped-{view}.npy")
        assert plain.shape != under.shape or not np.array_equal(plain, under), view  # routes: other nodes
        assert "exactly zero" not in err  # the diff view: clamped minus clean

    session, trace = _clamped_session(ckpt, folder)
    depth = session.config.n_layer
    expected = head_pattern(session, trace, 1, 2)
    assert_float32_close(np.load(tmp_path / "clamped-attention.npy"), expected,
                         reduction=model_reduction(session.config), depth=depth, what="clamped pattern")
    assert_float32_close(np.load(tmp_path / "clamped-residual.npy"), trace.resid_norms,
                         reduction=model_reduction(session.config), depth=depth, what="clamped residual norms")
    clean = session.run(None)
    assert not np.array_equal(np.load(tmp_path / "plain-residual.npy"), trace.resid_norms)
    assert_float32_close(np.load(tmp_path / "plain-residual.npy"), clean.resid_norms,
                         reduction=model_reduction(session.config), depth=depth, what="plain residual norms")


def _pixels(path: str) -> np.ndarray:
    from PySide6 import QtGui

    image = QtGui.QImage(path).convertToFormat(QtGui.QImage.Format.Format_RGBA8888)
    assert not image.isNull(), path
    data = np.frombuffer(bytes(image.constBits()), dtype=np.uint8)
    return data.reshape(image.height(), image.bytesPerLine())[:, :image.width() * 4].copy()


@pytest.mark.parametrize("ext,view", [(".npy", "attention"), (".csv", "residual"), (".png", "attention")])
def test_a_clamped_export_regenerates_from_its_manifest(ckpt, tmp_path, capsys, ext, view):
    folder = _sae(tmp_path / "sae")
    first, again = str(tmp_path / f"first{ext}"), str(tmp_path / f"again{ext}")
    _export(capsys, ckpt, first, "--view", view, "--sae", folder, *TYPED_CLAMPS, "--size", "420x300",
            "--write-manifest")
    parts = json.loads(open(first + ".manifest.json").read())["parts"]
    (sae,) = parts["saes"]["saes"]
    assert sae["spec"] == os.path.abspath(folder) and sae["hook"] == HOOK and sae["d_sae"] == D_SAE
    assert sae["fingerprint"]["sha256"] == sae_fingerprint(folder).digest
    assert [(c["feature"], c["kind"], c["value"], c["position"]) for c in parts["intervention"]["clamps"]] == \
        [(5, "scale", 3.0, None), (9, "set", 2.5, 4)]
    _ok(capsys, "export", "--from-manifest", first + ".manifest.json", "--out", again)
    if ext == ".png":
        assert np.array_equal(_pixels(first), _pixels(again))
    else:
        assert open(first, "rb").read() == open(again, "rb").read()
    plain = str(tmp_path / f"plain{ext}")
    _export(capsys, ckpt, plain, "--view", view, "--size", "420x300")
    same = np.array_equal(_pixels(plain), _pixels(first)) if ext == ".png" else \
        open(plain, "rb").read() == open(first, "rb").read()
    assert not same  # what was regenerated is the clamped figure


def test_a_gone_sae_is_one_line_a_changed_one_a_note_and_a_typed_one_stands_in(ckpt, tmp_path, capsys):
    folder = _sae(tmp_path / "sae")
    first = str(tmp_path / "first.npy")
    _export(capsys, ckpt, first, "--sae", folder, *TYPED_CLAMPS, "--write-manifest")
    manifest = first + ".manifest.json"
    moved = str(tmp_path / "moved")
    shutil.move(folder, moved)
    regenerate = ("export", "--from-manifest", manifest, "--out", str(tmp_path / "again.npy"))
    line = error_line(*cli(capsys, *regenerate))
    assert f"{os.path.abspath(folder)}: SAE 0 of the manifest" in line and "give it with --sae PATH[@HOOK]" in line
    _ok(capsys, *regenerate, "--sae", moved)  # the same SAE elsewhere: the same file
    assert np.load(first).tobytes() == np.load(tmp_path / "again.npy").tobytes()
    line = error_line(*cli(capsys, *regenerate, "--sae", moved, "--sae", moved))
    assert "opens 1 SAEs, and 2 --sae are given" in line

    _sae(folder, seed=11)  # the same place and shape, other weights
    err = _ok(capsys, *regenerate)
    notes = [n for n in err.splitlines() if "differs from the SAE the manifest" in n]
    assert len(notes) == 1 and "its clamps 0:5x3.0 0:9=2.5@4 were dropped" in notes[0]


def test_a_private_manifest_names_no_sae_path_and_asks_for_each(ckpt, tmp_path, capsys):
    folder = _sae(tmp_path / "my-sae")
    out = str(tmp_path / "p.npy")
    _export(capsys, ckpt, out, "--sae", folder, *TYPED_CLAMPS, "--write-manifest", "--manifest-private")
    text = open(out + ".manifest.json").read()
    assert str(tmp_path) not in text and PROMPT not in text
    assert json.loads(text)["parts"]["saes"]["saes"][0]["spec"] == "my-sae"
    regenerate = ("export", "--from-manifest", out + ".manifest.json", "--checkpoint", ckpt, "--prompt", PROMPT,
                  "--out", str(tmp_path / "q.npy"))
    line = error_line(*cli(capsys, *regenerate))
    assert "is private and leaves the paths of its SAEs out; give each of its 1 SAEs with --sae" in line
    _ok(capsys, *regenerate, "--sae", folder)
    assert np.load(out).tobytes() == np.load(tmp_path / "q.npy").tobytes()


def test_export_of_a_session_with_clamps_applies_them(ckpt, tmp_path, capsys):
    folder = _sae(tmp_path / "sae")
    sae = SaeRecord(0, folder, HOOK, TINY["n_embd"], D_SAE, sae_fingerprint(folder))
    session = registry.save(str(tmp_path / "s.tvsession"), {
        "checkpoint": record_of(load_checkpoint(ckpt)), "prompt": PromptRecord(PROMPT),
        "intervention": InterventionRecord(2, 4, (), "zero", CLAMPS), "saes": SaesRecord((sae,))})
    err = _ok(capsys, "export", "--session", session, *HEAD, "--view", "residual", "--out", str(tmp_path / "a.npy"))
    assert "without SAEs" not in err
    _export(capsys, ckpt, tmp_path / "b.npy", "--view", "residual", "--sae", folder, *TYPED_CLAMPS)
    _export(capsys, ckpt, tmp_path / "c.npy", "--view", "residual")
    a, b, c = (np.load(tmp_path / f"{n}.npy") for n in "abc")
    assert a.tobytes() == b.tobytes() and not np.array_equal(a, c)


def test_a_clamp_without_its_sae_is_one_line(ckpt, tmp_path, capsys):
    line = error_line(*cli(capsys, "export", ckpt, "--prompt", PROMPT, "--clamp", "5=0", "--out",
                           str(tmp_path / "a.npy")))
    assert "names SAE 0, but no --sae given" in line and not os.path.exists(tmp_path / "a.npy")
