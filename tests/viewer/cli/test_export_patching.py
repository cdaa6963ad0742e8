"""`transformer-viewer export --view patching` and the manifests of patching figures: the export's
raw grid is `patch --json`'s, exact or estimated, and regenerates bit for bit; `patch --out
--write-manifest` writes a manifest `export --from-manifest` regenerates pixel for pixel; a private
manifest holds neither prompt and asks for both; a session's patching setup fills the options."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.cli import cli
from tests.helpers.figures import png_pixels, regenerate, without_embedded_manifest
from tests.helpers.models import scaled_init_loaded
from tests.helpers.patch_references import CLEAN, CORRUPTED
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.sessions.figure_manifest import read_manifest

KL = ("--metric", "kl")  # no tokens to choose: any two prompts compare


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("export-patching") / "tiny.safetensors"
    save_checkpoint(scaled_init_loaded().model, str(path))
    return str(path)


def _ok(capsys, *argv) -> str:
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err
    return out


def _patch_json(capsys, ckpt, *argv) -> dict:
    return json.loads(_ok(capsys, "patch", ckpt, "--clean", CLEAN, "--corrupted", CORRUPTED, *argv, "--json"))


def _raw(result: dict) -> np.ndarray:
    shape = (len(result["rows"]), len(result["cols"]))
    raw = np.full(shape, np.nan, dtype=np.float32)
    for cell in result["cells"]:
        raw[cell["r"], cell["c"]] = cell["raw"]
    return raw


def _export(capsys, ckpt, out, *argv) -> str:
    _ok(capsys, "export", ckpt, "--view", "patching", "--prompt", CLEAN, "--corrupted", CORRUPTED, *argv,
        "--out", str(out))
    return str(out)


@pytest.mark.parametrize("argv", [("--what", "heads", "--tokens", " Mary", " John"),
                                  ("--what", "mlp", "--estimate", *KL),
                                  ("--what", "heads-by-pos", "--layer", "1", "--direction", "noise", *KL)])
def test_the_exports_grid_is_patch_jsons_and_regenerates_bit_for_bit(ckpt, capsys, tmp_path, argv):
    npy = _export(capsys, ckpt, tmp_path / "grid.npy", *argv, "--write-manifest")
    want = _patch_json(capsys, ckpt, *argv)
    got = np.load(npy)
    assert got.dtype == np.float32 and np.array_equal(got, _raw(want), equal_nan=True)  # float32 kept exact in JSON
    sidecar = json.load(open(npy + ".json", encoding="utf-8"))
    assert sidecar["estimate"] == want["estimate"] == ("--estimate" in argv) and sidecar["rows"] == want["rows"]
    records, _notes = read_manifest(npy + ".manifest.json")
    p = records["patching"]
    assert (p.corrupted, p.what, records["export"].estimate) == (CORRUPTED, argv[1], "--estimate" in argv)
    again = regenerate(capsys, npy + ".manifest.json", tmp_path / "again.npy")
    assert np.load(again).tobytes() == got.tobytes()


def test_patch_writes_the_manifest_export_regenerates_pixel_for_pixel(ckpt, capsys, tmp_path):
    png = tmp_path / "patch.png"
    _ok(capsys, "patch", ckpt, "--clean", CLEAN, "--corrupted", CORRUPTED, "--what", "attn", *KL, "--mask", "0.1",
        "--out", str(png), "--write-manifest")
    records, _notes = read_manifest(str(png) + ".manifest.json")
    e = records["export"]
    assert e.view == "patching" and records["intervention"].masked == ((0, 1),) and records["prompt"].text == CLEAN
    again = regenerate(capsys, str(png) + ".manifest.json", tmp_path / "again.png")
    a, b = png_pixels(png), png_pixels(again)
    assert a.shape == b.shape and a.shape[1] == round(e.scale * e.size[0]) and np.array_equal(a, b)
    svg = tmp_path / "patch.svg"  # the manifest inside the figure
    _ok(capsys, "patch", ckpt, "--clean", CLEAN, "--corrupted", CORRUPTED, "--what", "heads", *KL, "--out", str(svg),
        "--embed-manifest")
    again = regenerate(capsys, svg, tmp_path / "again.svg")
    assert without_embedded_manifest(svg.read_bytes()) == without_embedded_manifest(open(again, "rb").read())


def test_a_private_manifest_holds_neither_prompt_and_asks_for_both(ckpt, capsys, tmp_path):
    png = _export(capsys, ckpt, tmp_path / "private.png", "--what", "heads", *KL, "--scale", "1", "--write-manifest",
                  "--manifest-private")
    text = open(png + ".manifest.json", encoding="utf-8").read()
    assert "Mary gave" not in text and "John gave" not in text
    rc, _out, err = cli(capsys, "export", "--from-manifest", png + ".manifest.json", "--checkpoint", ckpt,
                        "--prompt", CLEAN, "--out", str(tmp_path / "again.png"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--prompt CLEAN --corrupted CORRUPTED" in err
    again = regenerate(capsys, png + ".manifest.json", tmp_path / "again.png", "--checkpoint", ckpt,
                       "--prompt", CLEAN, "--corrupted", CORRUPTED)
    assert np.array_equal(png_pixels(png), png_pixels(again))


def test_a_sessions_patching_setup_fills_the_options(ckpt, capsys, tmp_path):
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.sessions import registry
    from transformer_viewer.model.sessions.checkpoint_part import record_of
    from transformer_viewer.model.sessions.patching_part import PatchingRecord
    from transformer_viewer.model.sessions.prompt_part import PromptRecord

    setup = PatchingRecord(comparing=True, corrupted=CORRUPTED, metric="kl", what="heads-by-pos", layer=1,
                           direction="noise")
    session = registry.save(str(tmp_path / "s.tvsession"), {"checkpoint": record_of(load_checkpoint(ckpt)),
                                                            "prompt": PromptRecord(CLEAN), "patching": setup})
    npy = tmp_path / "session.npy"
    _ok(capsys, "export", "--session", session, "--view", "patching", "--out", str(npy))
    want = _patch_json(capsys, ckpt, "--what", "heads-by-pos", "--layer", "1", "--direction", "noise", *KL)
    assert np.array_equal(np.load(npy), _raw(want), equal_nan=True)
