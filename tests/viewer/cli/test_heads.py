"""`transformer-viewer heads` on a tiny checkpoint built here: table, JSON, sorting, errors."""

import json

import pytest
import torch

from transformer_viewer.model.analysis.heads import SCORES
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.viewer.cli.main import main


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(3)
    path = tmp_path_factory.mktemp("heads") / "tiny.safetensors"
    save_checkpoint(GPT(GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=16)), str(path))
    return str(path)


def test_json_has_every_head_and_score(ckpt, capsys):
    assert main(["heads", "--checkpoint", ckpt, "--device", "cpu", "--json", "--batch", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["n_layer"], doc["n_head"]) == (2, 2)
    assert set(doc["scores"]) == set(SCORES)
    assert all(len(doc["scores"][k]) == 2 and len(doc["scores"][k][0]) == 2 for k in SCORES)
    assert [(r["layer"], r["head"]) for r in doc["heads"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert doc["induction_length"] == 15 and doc["seed"] == 0
    r = doc["heads"][3]
    assert r["induction"] == pytest.approx(doc["scores"]["induction"][1][1], abs=1e-6)


def test_sorted_top_json(ckpt, capsys):
    assert main(["heads", "--checkpoint", ckpt, "--device", "cpu", "--json", "--batch", "1",
                 "--sort", "previous-token", "--top", "3"]) == 0
    heads = json.loads(capsys.readouterr().out)["heads"]
    assert len(heads) == 3
    values = [h["previous_token"] for h in heads]
    assert values == sorted(values, reverse=True)


def test_table(ckpt, capsys, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("Friends, Romans, countrymen, lend me your ears.\n\nAnd God said, Let there be light.\n")
    assert main(["heads", "--checkpoint", ckpt, "--device", "cpu", "--text", str(text), "--length", "8",
                 "--sort", "entropy", "--ascending"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(out) if line.split()[:2] == ["layer", "head"])
    body = out[header + 2 : header + 6]
    assert len(body) == 4 and all(len(line.split()) == 2 + len(SCORES) for line in body)
    entropies = [float(line.split()[-1]) for line in body]
    assert entropies == sorted(entropies)
    assert "8 tokens seen twice" in out[0]
    assert any(line.startswith("highest:") for line in out)


@pytest.mark.parametrize("extra, message", [
    (["--top", "0"], "--top"),
    (["--length", "40"], "context"),
    (["--text", "/nonexistent/text.txt"], "not found"),
])
def test_errors_are_one_line(ckpt, capsys, extra, message):
    assert main(["heads", "--checkpoint", ckpt, "--device", "cpu", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_missing_bundled_model_says_what_to_do(monkeypatch, capsys, tmp_path):
    from transformer_viewer.model.checkpoints import checkpoint

    monkeypatch.setattr(checkpoint, "bundled_checkpoint_path", lambda: str(tmp_path / "absent.safetensors"))
    assert main(["heads", "--device", "cpu"]) == 2
    assert "--checkpoint" in capsys.readouterr().err
