"""`transformer-viewer patch`: its JSON equals the library's grid on the same model and prompts,
.npy/.csv files are written whole with a sidecar, prompt-pairs files average, mistakes are one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.models import scaled_init_loaded
from tests.helpers.patch_references import CLEAN, CORRUPTED
from transformer_viewer.model.analysis.patching.attribution_patching import estimate_grid
from transformer_viewer.model.analysis.patching.exact import metric_top_tokens, patch_grid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.analysis.patching.path_patching import path_patch_grid
from transformer_viewer.model.capture.interventions import Intervention
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint

PAIR = ("--clean", CLEAN, "--corrupted", CORRUPTED)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("patch") / "tiny.safetensors"
    save_checkpoint(scaled_init_loaded().model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def session():
    s = Session(scaled_init_loaded())
    s.set_prompt(CLEAN)
    s.set_corrupted(CORRUPTED)
    return s


def _json(capsys, *argv):
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err
    return json.loads(out)


def test_json_equals_the_library(ckpt, session, capsys):
    data = _json(capsys, "patch", ckpt, *PAIR, "--what", "heads", "--tokens", " Mary", " John", "--mask", "1.0",
                 "--json")
    mask = np.zeros((session.config.n_layer, session.config.n_head), dtype=bool)
    mask[1, 0] = True
    grid = patch_grid(session, "heads", PatchMetric.make("logit-diff", (5335, 1757)),
                      intervention=Intervention.make(session.config, mask))
    assert data["clean"] == CLEAN and data["corrupted"] == CORRUPTED and data["model"]
    assert data["metric"]["tokens"] == [5335, 1757] and data["metric"]["token_text"] == [" Mary", " John"]
    assert data["clean_metric"] == pytest.approx(grid.clean, abs=1e-5)
    assert data["corrupted_metric"] == pytest.approx(grid.corrupted, abs=1e-5)
    assert data["rows"] == list(grid.rows) and data["cols"] == list(grid.cols) and data["col_axis"] == "head"
    raw = np.array([[c["raw"] for c in data["cells"] if c["r"] == r] for r in range(len(grid.rows))])
    np.testing.assert_allclose(raw, grid.raw, atol=1e-5)
    normalised = np.array([[c["normalised"] for c in data["cells"] if c["r"] == r] for r in range(len(grid.rows))])
    np.testing.assert_allclose(normalised, grid.normalised, atol=1e-4)
    assert data["intervention"] == "head 1.0 (zero)"


def test_default_tokens_are_the_two_runs_top_predictions(ckpt, session, capsys):
    clean_top, corrupted_top = metric_top_tokens(session)
    assert clean_top != corrupted_top  # the two runs of this model and pair disagree at the last position
    data = _json(capsys, "patch", ckpt, *PAIR, "--json")
    assert data["metric"]["tokens"] == [clean_top, corrupted_top]
    # Where they agree (one position earlier), the difference would say nothing.
    assert metric_top_tokens(session, -2)[0] == metric_top_tokens(session, -2)[1]
    assert "--tokens A B" in error_line(*cli(capsys, "patch", ckpt, *PAIR, "--position", "-2"))


def test_logprob_defaults_to_the_clean_top_token_and_noising_works(ckpt, session, capsys):
    data = _json(capsys, "patch", ckpt, *PAIR, "--metric", "logprob", "--direction", "noise", "--what", "v",
                 "--position", "-2", "--json")
    clean_top, _ = metric_top_tokens(session, -2)
    assert data["metric"]["tokens"] == [clean_top] and data["direction"] == "noise"
    grid = patch_grid(session, "v", PatchMetric.make("logprob", (clean_top,), -2), "noise")
    np.testing.assert_allclose([c["raw"] for c in data["cells"]], grid.raw.ravel(), atol=1e-5)


@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_data_files_hold_the_raw_grid_with_a_sidecar(ckpt, session, capsys, tmp_path, suffix):
    out = tmp_path / f"grid{suffix}"
    rc, _, err = cli(capsys, "patch", ckpt, *PAIR, "--what", "attn", "--metric", "kl", "--out", str(out))
    assert rc == 0 and "wrote" in err
    grid = patch_grid(session, "attn", PatchMetric.make("kl"))
    if suffix == ".npy":
        got = np.load(out)
    else:
        got = np.loadtxt(out, delimiter=",", skiprows=1, usecols=range(1, grid.raw.shape[1] + 1))
    np.testing.assert_allclose(got, grid.raw, atol=1e-5)
    side = json.loads((tmp_path / f"grid{suffix}.json").read_text())
    assert side["file"] == out.name and side["shape"] == list(grid.raw.shape) and side["clean"] == CLEAN
    assert side["clean_metric"] == pytest.approx(grid.clean, abs=1e-6) and "cells" not in side
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name, out.name + ".json"]  # nothing partial left


def test_a_pairs_file_averages(ckpt, capsys, tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"{CLEAN}\t{CORRUPTED}\n{CORRUPTED}\t{CLEAN}\n", encoding="utf-8")
    data = _json(capsys, "patch", ckpt, "--pairs", str(pairs), "--what", "heads", "--tokens", " Mary", " John",
                 "--json")
    one = _json(capsys, "patch", ckpt, *PAIR, "--what", "heads", "--tokens", " Mary", " John", "--json")
    swapped = _json(capsys, "patch", ckpt, "--clean", CORRUPTED, "--corrupted", CLEAN, "--what", "heads",
                    "--tokens", " Mary", " John", "--json")
    expected = (np.array([c["raw"] for c in one["cells"]]) + np.array([c["raw"] for c in swapped["cells"]])) / 2
    np.testing.assert_allclose([c["raw"] for c in data["cells"]], expected, atol=1e-5)
    assert data["clean_metric"] == pytest.approx((one["clean_metric"] + swapped["clean_metric"]) / 2, abs=1e-5)
    assert data["pairs_file"] == "pairs.tsv" and len(data["pairs"]) == 2 and "2 prompt pairs" in data["note"]


def test_estimate_and_path_patching_equal_the_library(ckpt, session, capsys):
    metric = PatchMetric.make("logit-diff", (5335, 1757))
    data = _json(capsys, "patch", ckpt, *PAIR, "--what", "heads", "--estimate", "--direction", "noise",
                 "--tokens", " Mary", " John", "--json")
    grid = estimate_grid(session, "heads", metric, "noise")
    assert data["estimate"] is True and data["note"] == grid.note
    np.testing.assert_allclose([c["raw"] for c in data["cells"]], grid.raw.ravel(), atol=1e-5)
    data = _json(capsys, "patch", ckpt, *PAIR, "--what", "path", "--receiver", "1.2", "--input", "v",
                 "--tokens", " Mary", " John", "--json")
    grid = path_patch_grid(session, (1, 2), "v", metric)
    assert data["what"] == "path" and data["estimate"] is False
    np.testing.assert_allclose([c["raw"] for c in data["cells"]], grid.raw.ravel(), atol=1e-5)
    err = error_line(*cli(capsys, "patch", ckpt, *PAIR, "--what", "q", "--estimate", "--tokens", " Mary", " John"))
    assert "--what q is patched exactly only" in err


def test_the_text_table_lists_the_cells_that_matter(ckpt, capsys):
    rc, out, _ = cli(capsys, "patch", ckpt, *PAIR, "--what", "mlp", "--tokens", " Mary", " John")
    assert rc == 0 and "clean" in out and "corrupted" in out and "normalised" in out


@pytest.mark.parametrize("argv, message", [
    (("--clean", "a"), "give the two prompts"),
    ((*PAIR, "--pairs", "x.tsv"), "not both"),
    ((*PAIR, "--out", "grid.txt"), ".npy or .csv"),
    ((*PAIR, "--what", "path"), "--receiver l.h --input"),
    ((*PAIR, "--what", "path", "--receiver", "x", "--input", "q"), "layer.head"),
    ((*PAIR, "--receiver", "1.1", "--input", "q"), "add --what path"),
    ((*PAIR, "--what", "heads-by-pos"), "add --layer"),
    ((*PAIR, "--layer", "1"), "heads-by-pos"),
    ((*PAIR, "--what", "heads-by-pos", "--layer", "9", "--tokens", "1", "2"), "give a layer in 0..1"),
    ((*PAIR, "--metric", "kl", "--tokens", "1"), "takes no --tokens"),
    ((*PAIR, "--metric", "logprob", "--tokens", "1", "2"), "takes 1 token"),
    ((*PAIR, "--tokens", " Mary and"), "not one"),
    ((*PAIR, "--mask", "9.9"), "layer 9 does not exist"),
    ((*PAIR, "--position", "99", "--tokens", "1", "2"), "outside"),
    (("--clean", CLEAN, "--corrupted", CORRUPTED + " again", "--what", "resid", "--tokens", "1", "2"),
     "differ in length"),
    (("--clean", "", "--corrupted", "x", "--metric", "kl"), "empty"),
])
def test_mistakes_are_one_line(ckpt, capsys, argv, message):
    assert message in error_line(*cli(capsys, "patch", ckpt, *argv)).lower()


def test_unequal_prompts_still_patch_heads(ckpt, capsys):
    data = _json(capsys, "patch", ckpt, "--clean", CLEAN, "--corrupted", CORRUPTED + " again", "--what", "pattern",
                 "--tokens", " Mary", " John", "--json")
    assert data["what"] == "pattern" and all(np.isfinite(c["raw"]) for c in data["cells"])
