"""`attribute` and `routes` with `--sae` and `--clamp`: their JSON equals the library's answer
under the same clamps, differs from the unclamped one, and lists the clamp terms."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.models import ANALYSIS_PROMPT as PROMPT
from tests.helpers.models import TINY, scaled_init_loaded
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from transformer_viewer.model.analysis.logit_attribution import logit_attribution
from transformer_viewer.model.analysis.routes import information_routes
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.sae.loading import load_sae


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("analysis_clamps")
    ckpt = root / "tiny.safetensors"
    save_checkpoint(scaled_init_loaded().model, str(ckpt))
    mid = write_saelens(root / "mid", saelens_cfg("standard", 32, 48, "blocks.1.hook_resid_mid"),
                        random_weights("standard", 32, 48, seed=1))
    z = write_saelens(root / "z", saelens_cfg("standard", 32, 48, "blocks.0.attn.hook_z"),
                      random_weights("standard", 32, 48, seed=2))
    return str(ckpt), mid, z


def _json(capsys, *argv):
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err
    return json.loads(out)


def _library(files):
    s = Session(scaled_init_loaded())
    s.set_prompt(PROMPT)
    for folder in files[1:]:
        s.attach_sae(load_sae(folder, TINY))
    return s


def test_attribute_with_clamps_lists_their_terms_and_matches_the_library(files, capsys):
    ckpt, mid, z = files
    argv = ("attribute", ckpt, "--prompt", PROMPT, "--tokens", " the", "--position", "-2", "--json")
    data = _json(capsys, *argv, "--sae", mid, "--sae", z, "--clamp", "0:5=4", "--clamp", "1:3x3@-2")
    plain = _json(capsys, *argv)
    s = _library(files)
    change = Intervention.make(TINY, clamps=(FeatureClamp(0, 5, "set", 4.0),
                                             FeatureClamp(1, 3, "scale", 3.0, len(s.tokens.ids) - 2)))
    ref = logit_attribution(s, position=-2, tokens=(262,), intervention=change)
    assert data["clamps"] == [c.describe() for c in change.clamps] and plain["clamps"] == []
    assert [t["value"] for t in data["terms"]] == pytest.approx([t["value"] for t in ref.terms()], abs=1e-6)
    assert [t["layer"] for t in data["terms"] if t["component"] == "clamp"] == [0, 1]
    assert not any(t["component"] == "clamp" for t in plain["terms"])
    assert data["logit"] != pytest.approx(plain["logit"], abs=1e-4)
    rc, out, _err = cli(capsys, *argv[:-1], "--sae", mid, "--clamp", "5=4", "--top", "40")
    assert rc == 0 and "clamps L1" in out and "clamped features: " in out


def test_routes_with_clamps_match_the_library_and_differ_from_unclamped(files, capsys):
    ckpt, mid, z = files
    argv = ("routes", ckpt, "--prompt", PROMPT, "--threshold", "0.02", "--json")
    data = _json(capsys, *argv, "--sae", mid, "--sae", z, "--clamp", "0:5=4", "--clamp", "1:3x3")
    plain = _json(capsys, *argv)
    s = _library(files)
    change = Intervention.make(TINY, clamps=(FeatureClamp(0, 5, "set", 4.0), FeatureClamp(1, 3, "scale", 3.0)))
    ref = information_routes(s, threshold=0.02, intervention=change)
    assert data["token_share"] == pytest.approx(ref.token_share.tolist(), abs=1e-6)
    assert len(data["edges"]) == len(ref.edges) and data["clamps"] == [c.describe() for c in change.clamps]
    assert data["token_share"] != pytest.approx(plain["token_share"], abs=1e-6)


@pytest.mark.parametrize("command", ["attribute", "routes"])
def test_a_clamp_without_its_sae_is_one_line(files, capsys, command):
    line = error_line(*cli(capsys, command, files[0], "--prompt", PROMPT, "--clamp", "5=1"))
    assert "names SAE 0, but no --sae given" in line
