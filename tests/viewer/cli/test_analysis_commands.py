"""`transformer-viewer attribute`, `routes` and `rollout`: their JSON equals the library's
answer on the same model and prompt, files are written whole, mistakes are one line."""

import json

import numpy as np
import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.models import ANALYSIS_PROMPT as PROMPT
from tests.helpers.models import scaled_init_loaded
from transformer_viewer.model.analysis.logit_attribution import logit_attribution
from transformer_viewer.model.analysis.rollout import rollout_rows
from transformer_viewer.model.analysis.routes import information_routes
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("analysis") / "tiny.safetensors"
    save_checkpoint(scaled_init_loaded().model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def session():
    s = Session(scaled_init_loaded())
    s.set_prompt(PROMPT)
    return s


def _json(capsys, *argv):
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err
    return json.loads(out)


def test_attribute_json_terms_sum_to_the_logit_and_match_the_library(ckpt, session, capsys):
    data = _json(capsys, "attribute", ckpt, "--prompt", PROMPT, "--tokens", " the", "42", "--mask", "1.2",
                 "--position", "-2", "--json")
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 2] = True
    ref = logit_attribution(session, position=-2, tokens=(262, 42), mask=mask)
    assert data["tokens"] == [262, 42] and data["position"] == ref.position and data["mask"] == ["1.2"]
    assert data["prompt"] == PROMPT and data["source"] == ckpt
    assert data["logit"] == pytest.approx(ref.logit, abs=1e-6)
    assert [t["value"] for t in data["terms"]] == pytest.approx([t["value"] for t in ref.terms()], abs=1e-6)
    assert sum(t["value"] for t in data["terms"]) == pytest.approx(data["logit"], abs=1e-4)
    assert {t["component"] for t in data["terms"]} == {"embedding", "position", "head", "attn_bias", "mlp",
                                                       "norm_bias", "unembed_bias"}


def test_attribute_text_and_csv(ckpt, capsys, tmp_path):
    rc, out, err = cli(capsys, "attribute", ckpt, "--prompt", PROMPT, "--top", "5")
    assert rc == 0 and "direct effects on logit(" in out and "frozen" in out
    assert len([line for line in out.splitlines() if line.startswith("  ") and "%" in line]) == 5
    path = tmp_path / "terms.csv"
    rc, out, err = cli(capsys, "attribute", ckpt, "--prompt", PROMPT, "--out", str(path))
    rows = path.read_text().splitlines()
    assert rc == 0 and rows[0] == "component,layer,head,value" and len(rows) == 1 + 2 + 2 * (4 + 2) + 2


def test_routes_json_matches_the_library(ckpt, session, capsys, tmp_path):
    data = _json(capsys, "routes", ckpt, "--prompt", PROMPT, "--threshold", "0.02", "--json")
    ref = information_routes(session, threshold=0.02)
    assert len(data["nodes"]) == len(ref.nodes) and len(data["edges"]) == len(ref.edges)
    assert data["token_share"] == pytest.approx(ref.token_share.tolist(), abs=1e-6)
    assert data["tokens"] == list(session.tokens.labels)
    assert data["prompt"] == PROMPT and data["model"] and data["source"] == ckpt
    out = tmp_path / "routes.json"
    rc, _, err = cli(capsys, "routes", ckpt, "--prompt", PROMPT, "--out", str(out), "--no-renormalize")
    assert rc == 0 and json.loads(out.read_text())["renormalized"] is False


@pytest.mark.parametrize("ext, magic", [(".svg", b"<?xml"), (".pdf", b"%PDF"), (".png", b"\x89PNG")])
def test_routes_figure_is_the_views_drawing(ckpt, session, capsys, tmp_path, ext, magic):
    """--out FILE.svg|.pdf|.png draws the graph through the Routes tab's widget."""
    out = tmp_path / f"routes{ext}"
    rc, _, err = cli(capsys, "routes", ckpt, "--prompt", PROMPT, "--threshold", "0.02", "--out", str(out))
    assert rc == 0, err
    data = out.read_bytes()
    assert data.startswith(magic) and len(data) > 1000
    if ext == ".svg":  # the view's title, and one circle per node of the library's graph
        text = data.decode("utf-8")
        assert "routes to" in text
        assert text.count("<circle") == len(information_routes(session, threshold=0.02).nodes) > 0


def test_rollout_rows_and_files(ckpt, session, capsys, tmp_path):
    T = len(session.tokens.ids)
    path = tmp_path / "rollout.npy"
    rc, _, err = cli(capsys, "rollout", ckpt, "--prompt", PROMPT, "--layers", "1:2", "--heads", "1.0,1.3",
                     "--out", str(path))
    assert rc == 0, err
    got = np.load(path)
    ref = rollout_rows(session, 0, T, layers=(1, 2), heads=[(1, 0), (1, 3)])
    assert got.dtype == np.float32 and got.shape == (T, T)
    np.testing.assert_array_equal(got, ref.rows)
    rc, out, _ = cli(capsys, "rollout", ckpt, "--prompt", PROMPT, "--query", "-1", "--heads", "max")
    assert rc == 0 and f"query {T - 1}" in out and "heads max" in out
    csv = tmp_path / "row.csv"
    rc, _, _ = cli(capsys, "rollout", ckpt, "--prompt", PROMPT, "--query", "3", "--out", str(csv))
    lines = csv.read_text().splitlines()
    assert rc == 0 and len(lines) == 2 and lines[1].startswith("3,")


@pytest.mark.parametrize("argv, expect", [
    (["attribute", "--tokens", "1", "2", "3"], "--tokens takes one token or two"),
    (["attribute", "--tokens", " the cat"], "not one"),
    (["attribute", "--position", "99"], "position 99 is outside the prompt's"),
    (["attribute", "--out", "x.png"], "the terms are written as .json or .csv"),
    (["routes", "--threshold", "1"], "--threshold 1.0: give a contribution from 0"),
    (["routes", "--out", "x.txt"], "the routes are written as .json, or drawn as .svg, .pdf or .png"),
    (["rollout", "--layers", "2:1"], "layers 2:1 are not a range"),
    (["rollout", "--layers", "x"], "write A:B"),
    (["rollout", "--heads", "avg"], "use mean, max, or heads L.H"),
    (["rollout", "--heads", "9.0"], "head 9.0 is not in this model"),
    (["rollout", "--heads", "1.0", "--no-residual"], "needs a chosen head"),
    (["rollout", "--query", "99"], "position 99 is outside"),
])
def test_mistakes_are_one_line(ckpt, capsys, argv, expect):
    line = error_line(*cli(capsys, argv[0], ckpt, "--prompt", PROMPT, *argv[1:]))
    assert expect in line


@pytest.mark.parametrize("command", ["attribute", "routes", "rollout"])
def test_a_prompt_over_the_context_is_noted_as_every_command_notes_it(ckpt, capsys, command):
    long = "the cat sat on the mat " * 40  # past the tiny model's 64-token context
    rc, _, err = cli(capsys, command, ckpt, "--prompt", long, *(["--query", "-1"] if command == "rollout" else []))
    assert rc == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note: the prompt is longer")]
    assert len(notes) == 1 and "dropped the first" in notes[0]
