"""`features`, `predict`, `attribute` and `routes` with `--session`: a session's SAEs, clamps, BOS choice and top-k
give what the same options typed by hand give; typed options win; a missing SAE is one line, a
changed one a note that drops its clamps."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.window import TINY, make_checkpoint
from transformer_viewer.model.capture.interventions import FeatureClamp
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.sessions import registry
from transformer_viewer.model.sessions.checkpoint_part import record_of
from transformer_viewer.model.sessions.fingerprint import sae_fingerprint
from transformer_viewer.model.sessions.prompt_part import InterventionRecord, PromptRecord
from transformer_viewer.model.sessions.saes_part import SaeRecord, SaesRecord
from transformer_viewer.model.sessions.view_parts import SelectionRecord

PROMPT = "When Mary and John went to the store, John gave a drink to"
HOOK = "blocks.0.hook_resid_post"
D_SAE = 48
CLAMPS = (FeatureClamp(0, 5, "scale", 3.0), FeatureClamp(0, 9, "set", 2.5, 4))
TYPED = ("--prompt", PROMPT, "--mask", "1.2", "--ablation", "mean", "--sae")  # then the SAE's folder


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("sae-sessions-cli") / "tiny.safetensors")


def _sae(folder, seed: int = 4) -> str:
    weights = random_weights("standard", TINY["n_embd"], D_SAE, seed=seed)
    weights["W_enc"] *= 4.0  # several features fire at each token
    return write_saelens(folder, saelens_cfg("standard", TINY["n_embd"], D_SAE, HOOK), weights)


def _session(path, ckpt, folder, fingerprint=None):
    sae = SaeRecord(0, folder, HOOK, TINY["n_embd"], D_SAE, fingerprint or sae_fingerprint(folder))
    records = {"checkpoint": record_of(load_checkpoint(ckpt)), "prompt": PromptRecord(PROMPT),
               "intervention": InterventionRecord(2, 4, ((1, 2),), "mean", CLAMPS),
               "selection": SelectionRecord(1, 3, 5), "saes": SaesRecord((sae,), 0, 5, True, 7)}
    return registry.save(str(path), records)


def _json(capsys, *argv):
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err
    return json.loads(out), err


def test_predict_and_features_take_the_sessions_saes_and_clamps_as_typed(ckpt, tmp_path, capsys):
    folder = _sae(tmp_path / "sae")
    session = _session(tmp_path / "s.tvsession", ckpt, folder)
    clamps = ("--clamp", "0:5x3.0", "--clamp", "0:9=2.5@4")
    a, _ = _json(capsys, "predict", "--session", session, "--json")
    b, _ = _json(capsys, "predict", ckpt, *TYPED, folder, *clamps, "--position", "5", "--json")
    assert a == b and a["clamps"] == ["0:5x3", "0:9=2.5@4"] and a["position"] == 5 and a["mask"] == ["1.2"]
    plain, _ = _json(capsys, "predict", ckpt, *TYPED, folder, "--position", "5", "--json")
    assert plain["top"] != a["top"]  # the clamps change the prediction
    f, _ = _json(capsys, "features", "--session", session, "--json")
    g, _ = _json(capsys, "features", ckpt, *TYPED, folder, *clamps, "--top", "7", "--bos", "--json")
    assert f == g and max(len(t) for t in f["features"]) == 7 and f["features"][0]  # BOS listed


def test_attribute_and_routes_take_the_sessions_saes_and_clamps_as_typed(ckpt, tmp_path, capsys):
    folder = _sae(tmp_path / "sae")
    session = _session(tmp_path / "s.tvsession", ckpt, folder)
    clamps = ("--clamp", "0:5x3.0", "--clamp", "0:9=2.5@4")
    a, _ = _json(capsys, "attribute", "--session", session, "--position", "4", "--json")
    b, _ = _json(capsys, "attribute", ckpt, *TYPED, folder, *clamps, "--position", "4", "--json")
    assert a == b and a["clamps"] == ["0:5x3", "0:9=2.5@4"]
    assert [t["layer"] for t in a["terms"] if t["component"] == "clamp"] == [0]
    r, _ = _json(capsys, "routes", "--session", session, "--json")
    q, _ = _json(capsys, "routes", ckpt, *TYPED, folder, *clamps, "--position", "5", "--json")
    plain, _ = _json(capsys, "routes", ckpt, *TYPED, folder, "--position", "5", "--json")
    assert r == q and r["clamps"] == a["clamps"] and plain["token_share"] != r["token_share"]


def test_typed_clamps_and_saes_win_over_the_sessions(ckpt, tmp_path, capsys):
    folder = _sae(tmp_path / "sae")
    other = _sae(tmp_path / "other", seed=9)
    session = _session(tmp_path / "s.tvsession", ckpt, folder)
    a, _ = _json(capsys, "predict", "--session", session, "--clamp", "0:7=0", "--json")
    b, _ = _json(capsys, "predict", ckpt, *TYPED, folder, "--clamp", "0:7=0", "--position", "5", "--json")
    assert a == b and a["clamps"] == ["0:7=0"]
    c, _ = _json(capsys, "features", "--session", session, "--sae", other, "--json")
    d, _ = _json(capsys, "features", ckpt, *TYPED, other, "--json")
    assert c == d  # the session's clamps name its own SAE: with another SAE typed, none apply


def test_a_missing_sae_is_one_line_and_a_changed_one_drops_its_clamps(ckpt, tmp_path, capsys):
    folder = _sae(tmp_path / "sae")
    session = _session(tmp_path / "s.tvsession", ckpt, folder)
    shutil.rmtree(folder)
    line = error_line(*cli(capsys, "predict", "--session", session))
    assert "SAE 0 of the session" in line and "is not on this machine; give it with --sae PATH[@HOOK]" in line

    _sae(folder, seed=11)  # the same place and shape, other weights
    a, err = _json(capsys, "predict", "--session", session, "--json")
    assert "differs from the SAE the session" in err and "its clamps 0:5x3.0 0:9=2.5@4 were dropped" in err
    b, _ = _json(capsys, "predict", ckpt, *TYPED, folder, "--position", "5", "--json")
    assert a == b and a["clamps"] == []


def test_a_command_without_saes_says_it_runs_without_the_sessions_clamps(ckpt, tmp_path, capsys):
    session = _session(tmp_path / "s.tvsession", ckpt, _sae(tmp_path / "sae"))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    rc, _out, err = cli(capsys, "rollout", "--session", session, "--out", str(a))
    assert rc == 0 and "clamps 2 SAE features; this command runs without SAEs, so without them" in err
    rc, _out, err = cli(capsys, "rollout", ckpt, *TYPED[:-1], "--query", "5", "--out", str(b))
    assert rc == 0 and json.loads(a.read_text()) == json.loads(b.read_text())
