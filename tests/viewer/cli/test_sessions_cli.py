"""`--session FILE` in the commands, and figure manifests: a command given a session computes
what it computes given the same checkpoint, prompt and mask by hand; an export regenerated from
its manifest is the same file; a missing checkpoint or a hostile manifest is one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.window import make_checkpoint
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.sessions import registry
from transformer_viewer.model.sessions.checkpoint_part import record_of
from transformer_viewer.model.sessions.prompt_part import InterventionRecord, PromptRecord
from transformer_viewer.model.sessions.view_parts import SelectionRecord, ViewsRecord

PROMPT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("sessions-cli") / "tiny.safetensors")


def _session(path, ckpt, masked=((1, 2),), query=5, tokens=()):
    records = {"checkpoint": record_of(load_checkpoint(ckpt)), "prompt": PromptRecord(PROMPT),
               "intervention": InterventionRecord(2, 4, masked, "mean"),
               "selection": SelectionRecord(1, 3, query), "views": ViewsRecord(attribution_tokens=tokens)}
    return registry.save(str(path), records)


def _ok(capsys, *argv):
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err
    return out, err


def test_attribute_and_routes_take_the_session_as_the_same_arguments_typed(ckpt, tmp_path, capsys):
    session = _session(tmp_path / "s.tvsession", ckpt, tokens=(262, 11))
    by_hand = ("--prompt", PROMPT, "--mask", "1.2", "--ablation", "mean", "--position", "5")
    a = json.loads(_ok(capsys, "attribute", "--session", session, "--json")[0])
    b = json.loads(_ok(capsys, "attribute", ckpt, *by_hand, "--tokens", "262", "11", "--json")[0])
    assert a == b and a["mask"] == ["1.2"] and a["position"] == 5 and a["tokens"] == [262, 11]
    r = json.loads(_ok(capsys, "routes", "--session", session, "--json")[0])
    assert r == json.loads(_ok(capsys, "routes", ckpt, *by_hand, "--json")[0])
    _ok(capsys, "rollout", "--session", session, "--out", str(tmp_path / "a.npy"))
    _ok(capsys, "rollout", ckpt, *by_hand[:6], "--query", "5", "--out", str(tmp_path / "b.npy"))
    assert np.load(tmp_path / "a.npy").tobytes() == np.load(tmp_path / "b.npy").tobytes()


def test_export_takes_the_session_and_options_given_win(ckpt, tmp_path, capsys):
    session = _session(tmp_path / "s.tvsession", ckpt)
    _ok(capsys, "export", "--session", session, "--view", "residual", "--out", str(tmp_path / "a.npy"))
    _ok(capsys, "export", ckpt, "--prompt", PROMPT, "--mask", "1.2", "--ablation", "mean", "--layer", "1",
        "--head", "3", "--query", "5", "--view", "residual", "--out", str(tmp_path / "b.npy"))
    assert np.load(tmp_path / "a.npy").tobytes() == np.load(tmp_path / "b.npy").tobytes()
    _ok(capsys, "export", "--session", session, "--prompt", "Another text", "--view", "residual",
        "--out", str(tmp_path / "c.npy"))
    assert np.load(tmp_path / "c.npy").shape != np.load(tmp_path / "a.npy").shape


@pytest.mark.parametrize("ext,view", [(".png", "attention"), (".svg", "grid"), (".npy", "residual"),
                                      (".csv", "attention")])
def test_a_figure_regenerated_from_its_manifest_is_the_same_file(ckpt, tmp_path, capsys, ext, view):
    first, again = str(tmp_path / f"first{ext}"), str(tmp_path / f"again{ext}")
    _ok(capsys, "export", ckpt, "--prompt", PROMPT, "--mask", "0.1", "--view", view, "--layer", "1", "--head", "2",
        "--theme", "dark", "--size", "420x300", "--out", first, "--write-manifest")
    manifest = json.loads(open(first + ".manifest.json").read())
    parts = manifest["parts"]
    assert parts["export"]["sha256"] and parts["prompt"]["text"] == PROMPT and parts["checkpoint"]["fingerprint"]
    assert parts["environment"]["kernel_path"].startswith("gemm=") and parts["environment"]["threads"] >= 1
    _ok(capsys, "export", "--from-manifest", first + ".manifest.json", "--out", again)
    assert open(first, "rb").read() == open(again, "rb").read()


def test_a_private_manifest_leaves_the_prompt_and_paths_out(ckpt, tmp_path, capsys):
    out = str(tmp_path / "p.npy")
    _ok(capsys, "export", ckpt, "--prompt", PROMPT, "--view", "residual", "--out", out, "--write-manifest",
        "--manifest-private")
    text = open(out + ".manifest.json").read()
    assert PROMPT not in text and str(tmp_path) not in text
    regenerate = ("export", "--from-manifest", out + ".manifest.json", "--out", str(tmp_path / "q.npy"))
    assert "tiny.safetensors: the checkpoint the manifest" in error_line(*cli(capsys, *regenerate))
    assert "give the text to run with --prompt" in error_line(*cli(capsys, *regenerate, "--checkpoint", ckpt))
    _ok(capsys, "export", "--from-manifest", out + ".manifest.json", "--checkpoint", ckpt, "--prompt", PROMPT,
        "--out", str(tmp_path / "q.npy"))
    assert np.load(out).tobytes() == np.load(tmp_path / "q.npy").tobytes()


def test_a_missing_checkpoint_is_one_line_and_a_changed_one_a_note(tmp_path, capsys):
    ckpt = make_checkpoint(tmp_path / "m.safetensors")
    session = _session(tmp_path / "s.tvsession", ckpt)
    make_checkpoint(tmp_path / "m.safetensors", seed=3)
    _out, err = _ok(capsys, "attribute", "--session", session, "--json")
    assert "differs from the checkpoint the session" in err
    shutil.move(ckpt, tmp_path / "gone.safetensors")
    line = error_line(*cli(capsys, "attribute", "--session", session))
    assert "is not on this machine; give it with --checkpoint PATH" in line
    _ok(capsys, "attribute", "--session", session, "--checkpoint", str(tmp_path / "gone.safetensors"))


def test_a_session_for_another_shape_is_one_line(tmp_path, capsys):
    session = _session(tmp_path / "s.tvsession", make_checkpoint(tmp_path / "a.safetensors"))
    other = make_checkpoint(tmp_path / "b.safetensors", n_layer=1)
    line = error_line(*cli(capsys, "routes", "--session", session, "--checkpoint", other))
    assert "--mask 1.2: layer 1 does not exist" in line


@pytest.mark.parametrize("ext", [".svg", ".pdf"])
def test_a_manifest_embedded_in_the_figure_regenerates_it(ckpt, tmp_path, capsys, ext):
    import base64
    import re

    first, again = str(tmp_path / f"first{ext}"), str(tmp_path / f"other-name{ext}")
    _ok(capsys, "export", ckpt, "--prompt", PROMPT, "--mask", "1.0", "--view", "attention", "--head", "1.1",
        "--size", "400x300", "--out", first, "--embed-manifest")
    data = open(first, "rb").read()
    found = re.search(rb"(?:transformer-viewer-manifest\">|<tv:manifest>)([A-Za-z0-9+/=]+)<", data)
    embedded = json.loads(base64.b64decode(found.group(1)))
    assert embedded["parts"]["prompt"]["text"] == PROMPT and embedded["parts"]["export"]["embed"] is True
    _ok(capsys, "export", "--from-manifest", first, "--out", again)
    # A PDF records when it was written and a random document id: every other byte is the same.
    dated = re.compile(rb"/(CreationDate|ModDate) \(D:\d+Z\)|/ID \[[^\]]*\]")
    assert dated.sub(b"", open(again, "rb").read()) == dated.sub(b"", data)


def test_a_private_embedded_manifest_holds_no_prompt(ckpt, tmp_path, capsys):
    out = str(tmp_path / "p.svg")
    _ok(capsys, "export", ckpt, "--prompt", PROMPT, "--out", out, "--embed-manifest", "--manifest-private")
    from transformer_viewer.model.sessions.figure_manifest import read_manifest

    records, _notes = read_manifest(out)
    assert "prompt" not in records and records["checkpoint"].source == "tiny.safetensors"
    assert PROMPT.encode() not in open(out, "rb").read()
    line = error_line(*cli(capsys, "export", ckpt, "--prompt", PROMPT, "--out", str(tmp_path / "a.png"),
                           "--embed-manifest"))
    assert "--embed-manifest is for .svg and .pdf figures, not .png" in line


def test_patch_takes_the_clean_and_corrupted_prompts_from_the_session(ckpt, tmp_path, capsys):
    from transformer_viewer.model.sessions.patching_part import PatchingRecord

    corrupted = "When John and Mary went to the store, Mary gave a drink to"
    records = {"checkpoint": record_of(load_checkpoint(ckpt)), "prompt": PromptRecord(PROMPT),
               "intervention": InterventionRecord(2, 4, ((1, 0),), "zero"), "selection": SelectionRecord(1, 3, 2),
               "patching": PatchingRecord(True, corrupted)}
    session = registry.save(str(tmp_path / "p.tvsession"), records)
    common = ("--what", "heads", "--tokens", " Mary", " John", "--json")
    a = json.loads(_ok(capsys, "patch", "--session", session, *common)[0])
    b = json.loads(_ok(capsys, "patch", ckpt, "--clean", PROMPT, "--corrupted", corrupted, "--mask", "1.0", *common)[0])
    assert a == b and a["clean"] == PROMPT and a["corrupted"] == corrupted


def test_a_region_zooms_the_heatmap_and_its_manifest_regenerates_it(ckpt, tmp_path, capsys):
    from tests.helpers.figures import png_pixels

    whole, zoomed, again = (str(tmp_path / f"{n}.png") for n in ("whole", "zoomed", "again"))
    common = ("export", ckpt, "--prompt", PROMPT, "--view", "logit-lens", "--size", "600x300", "--scale", "1")
    _ok(capsys, *common, "--out", whole)
    _ok(capsys, *common, "--region", "2.5,9,0,2", "--out", zoomed, "--write-manifest")
    assert json.loads(open(zoomed + ".manifest.json").read())["parts"]["export"]["region"] == [2.5, 9.0, 0.0, 2.0]
    assert png_pixels(whole).shape == png_pixels(zoomed).shape
    assert not np.array_equal(png_pixels(whole), png_pixels(zoomed))
    _ok(capsys, "export", "--from-manifest", zoomed + ".manifest.json", "--out", again)
    assert open(zoomed, "rb").read() == open(again, "rb").read()
