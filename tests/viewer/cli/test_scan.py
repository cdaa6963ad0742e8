"""`transformer-viewer scan`: table, JSON, token parsing, errors."""

import json

import numpy as np
import pytest

from tests.helpers.models import ANALYSIS_PROMPT as PROMPT
from tests.helpers.models import scaled_init_loaded
from transformer_viewer.model.analysis.scan import head_scan
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer, parse_token
from transformer_viewer.viewer.cli.main import main


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("scan") / "tiny.safetensors"
    save_checkpoint(scaled_init_loaded().model, str(path))
    return str(path)


def _scan_json(capsys, *argv):
    rc = main(["scan", *argv, "--json", "--no-progress"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_json_equals_the_library_scan(ckpt, capsys):
    data = _scan_json(capsys, "--checkpoint", ckpt, "--prompt", PROMPT, "--target", " the", "--mask", "0.3")
    s = Session(scaled_init_loaded(), keep_full=True)
    s.set_prompt(PROMPT)
    base = np.zeros((2, 4), dtype=bool)
    base[0, 3] = True
    ref = head_scan(s, target=262, base_mask=base)
    assert data["target"] == {"id": 262, "token": " the", "label": "·the"}
    assert data["base_mask"] == ["0.3"] and data["metric"] == "logprob"
    assert len(data["heads"]) == 7
    effects = [h["effect"] for h in data["heads"]]
    assert effects == sorted(effects)
    for h in data["heads"]:
        assert h["effect"] == pytest.approx(float(ref.effect[h["layer"], h["head"]]), abs=1e-5)
        assert h["kl"] == pytest.approx(float(ref.kl[h["layer"], h["head"]]), rel=1e-4, abs=1e-7)
        assert h["target_prob"] == pytest.approx(float(ref.target_probs[h["layer"], h["head"]]), rel=1e-5)


def test_tokens_is_the_same_as_target_and_distractor(ckpt, capsys):
    common = ("--checkpoint", ckpt, "--prompt", PROMPT)
    pair = _scan_json(capsys, *common, "--tokens", " the", " a")
    spelled = _scan_json(capsys, *common, "--target", " the", "--distractor", " a")
    assert pair == spelled and pair["metric"] != "logprob"
    assert _scan_json(capsys, *common, "--tokens", " the") == _scan_json(capsys, *common, "--target", " the")


def test_table_and_progress(ckpt, capsys, monkeypatch):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # the bar is drawn on terminals only
    rc = main(["scan", "--checkpoint", ckpt, "--prompt", PROMPT, "--distractor", "262", "--sort", "kl", "--top", "3"])
    out = capsys.readouterr()
    assert rc == 0
    lines = out.out.strip().splitlines()
    assert "logit(" in lines[0] and len(lines) == 2 + 3
    assert "8/8" in out.err  # the tqdm bar ran to the end
    kls = [float(line.split()[-1]) for line in lines[2:]]
    assert kls == sorted(kls, reverse=True)


@pytest.mark.parametrize("argv, message", [
    (["--target", "Parisian cats"], "is 3 GPT-2 tokens"),
    (["--target", "99999"], "token ids run from 0"),
    (["--distractor", ""], "is 0 GPT-2 tokens"),
    (["--mask", "7.1"], "layer 7 does not exist"),
    (["--position", "500"], "outside the prompt"),
    (["--tokens", " the", "--target", " a"], "give --tokens A [B], or --target and --distractor, not both"),
    (["--tokens", "1", "2", "3"], "--tokens takes one token or two"),
])
def test_errors_are_one_line_and_exit_2(ckpt, capsys, argv, message):
    rc = main(["scan", "--checkpoint", ckpt, "--prompt", PROMPT, "--no-progress", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert message in err and "\n" not in err and "Traceback" not in err


def test_parse_token():
    tok = Tokenizer()
    assert parse_token(" Paris", tok, 50257) == 6342
    assert parse_token("6342", tok, 50257) == 6342
    assert parse_token(" 42", tok, 50257) == tok.encode(" 42")[0]
    assert parse_token(None, tok, 50257) is None


def test_scan_equals_predict_cli_with_the_head_masked(ckpt, capsys):
    data = _scan_json(capsys, "--checkpoint", ckpt, "--prompt", PROMPT)
    target = data["target"]["id"]
    for h in data["heads"][:3]:
        rc = main(["predict", "--checkpoint", ckpt, "--prompt", PROMPT, "--mask", f"{h['layer']}.{h['head']}",
                   "--json", "--top-k", "2000"])
        out = capsys.readouterr()
        assert rc == 0, out.err
        pred = json.loads(out.out)
        probs = _predict_probs(pred)
        assert target in probs
        assert probs[target] == pytest.approx(h["target_prob"], rel=1e-4)


def _predict_probs(pred) -> dict[int, float]:
    """{token id: probability} from predict's JSON: {"top": [{"id", "token", "prob", "logit"}, ...]}."""
    return {t["id"]: t["prob"] for t in pred["top"]}
