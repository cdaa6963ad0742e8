"""`transformer-viewer patch --estimate` and `--what path`: the JSON equals the library's
attribution-patching and path-patching grids on the same model and prompts, and a kind the
estimate does not cover is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.models import scaled_init_loaded
from tests.helpers.patch_references import CLEAN, CORRUPTED
from transformer_viewer.model.analysis.patching.attribution_patching import estimate_grid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.analysis.patching.path_patching import path_patch_grid
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint

PAIR = ("--clean", CLEAN, "--corrupted", CORRUPTED, "--tokens", " Mary", " John")
METRIC = PatchMetric.make("logit-diff", (5335, 1757))  # " Mary", " John"


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


def _raw(data) -> np.ndarray:
    rows = len(data["rows"])
    return np.array([[c["raw"] for c in data["cells"] if c["r"] == r] for r in range(rows)])


def test_the_estimate_is_the_librarys(ckpt, session, capsys):
    rc, out, err = cli(capsys, "patch", ckpt, *PAIR, "--what", "heads-by-pos", "--layer", "1", "--estimate",
                       "--json")
    assert rc == 0, err
    data = json.loads(out)
    grid = estimate_grid(session, "heads-by-pos", METRIC, layer=1)
    assert data["estimate"] is True and data["rows"] == list(grid.rows) == [f"1.{h}" for h in range(4)]
    np.testing.assert_allclose(_raw(data), grid.raw, atol=1e-5)
    every = estimate_grid(session, "heads-by-pos", METRIC)  # every layer's heads from the same backward
    np.testing.assert_array_equal(every.raw[4:8], grid.raw)


def test_path_patching_is_the_librarys(ckpt, session, capsys):
    rc, out, err = cli(capsys, "patch", ckpt, *PAIR, "--what", "path", "--receiver", "1.2", "--input", "k",
                       "--direction", "noise", "--json")
    assert rc == 0, err
    data = json.loads(out)
    grid = path_patch_grid(session, (1, 2), "k", METRIC, "noise")
    np.testing.assert_allclose(_raw(data), grid.raw, atol=1e-5)
    assert data["estimate"] is False and data["direction"] == "noise"


def test_a_kind_the_estimate_does_not_cover_is_one_line(ckpt, capsys):
    line = error_line(*cli(capsys, "patch", ckpt, *PAIR, "--what", "pattern", "--estimate"))
    assert "--what pattern is patched exactly only: leave out --estimate" in line
