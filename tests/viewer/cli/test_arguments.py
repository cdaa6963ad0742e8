"""One command line: CHECKPOINT positionally or as --checkpoint in every command, arguments
judged before any model loads (and without importing torch), JSON that records what was run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from transformer_viewer.model.checkpoints import checkpoint as checkpoint_module
from transformer_viewer.viewer.cli.main import SUBCOMMANDS, build_parser, gui_parser, main

COMMANDS_WITH_CHECKPOINT = ["info", "predict", "heads", "scan", "export", "attribute", "routes", "rollout", "patch",
                            "features"]
REQUIRED = {"patch": ["--clean", "x", "--corrupted", "y"], "predict": ["--prompt", "x"],
            "features": ["--sae", "x", "--prompt", "x"], "scan": ["--prompt", "x"], "export": ["--prompt", "x", "--out", "x.png"],
            "attribute": ["--prompt", "x"], "routes": ["--prompt", "x"], "rollout": ["--prompt", "x"]}


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("name", COMMANDS_WITH_CHECKPOINT + ["window"])
def test_checkpoint_both_ways(name):
    parser = gui_parser() if name == "window" else build_parser(name)
    rest = REQUIRED.get(name, [])
    assert parser.parse_args(["m.safetensors", *rest]).checkpoint == "m.safetensors"
    assert parser.parse_args(["--checkpoint", "m.safetensors", *rest]).checkpoint == "m.safetensors"
    assert parser.parse_args(rest).checkpoint is None
    assert parser.parse_args(["m.pt", "--checkpoint", "m.pt", *rest]).checkpoint == "m.pt"  # the same, twice


def test_every_model_command_takes_a_checkpoint():
    assert set(SUBCOMMANDS) - set(COMMANDS_WITH_CHECKPOINT) == {"train"}  # train writes one, with --out


def test_two_different_checkpoints_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["predict", "a.safetensors", "--checkpoint", "b.safetensors", "--prompt", "x"])
    assert e.value.code == 2
    assert "two checkpoints given (a.safetensors and --checkpoint b.safetensors)" in capsys.readouterr().err


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: these errors must come first."""
    def refuse(*a, **kw):
        raise AssertionError("a model was loaded before the arguments were checked")
    monkeypatch.setattr(checkpoint_module, "load_checkpoint", refuse)


@pytest.mark.parametrize("argv, fragment", [
    (["export", "--prompt", "x", "--scale", "0", "--out", "{tmp}/x.png"], "--scale 0 is out of range"),
    (["export", "--prompt", "x", "--out", "{tmp}/missing/x.png"], "does not exist"),
    (["export", "--prompt", "x", "--out", "{tmp}/x.png", "--mask", "1-2"], "bad --mask '1-2'"),
    (["export", "--prompt", "x", "--out", "{tmp}/x.png", "--layer", "-1"], "--layer -1: counts from 0"),
    (["export", "--prompt", "x", "--out", "{tmp}/x.png", "--view", "mlp", "--rows", "0"], "--rows must be at least 1"),
    (["predict", "--prompt", "x", "--mask", "a.b"], "bad --mask 'a.b'"),
    (["scan", "--prompt", "x", "--mask", "3"], "bad --mask '3'"),
    (["patch", "--clean", "x"], "give the two prompts"),
    (["patch", "--clean", "x", "--corrupted", "y", "--what", "path"], "--receiver L.H --input"),
    (["patch", "--clean", "x", "--corrupted", "y", "--mask", "1-2"], "bad --mask '1-2'"),
    (["predict", "--prompt", "x", "--clamp", "5=1"], "names SAE 0, but no --sae given"),
    (["predict", "--prompt", "x", "--sae", "x", "--clamp", "5:1"], "--clamp '5:1': write"),
    (["features", "--prompt", "x", "--sae", "x", "--top", "0"], "--top must be at least 1"),
])
def test_arguments_are_checked_before_a_model_loads(no_model, tmp_path, capsys, argv, fragment):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    line = one_error(capsys)
    assert line.startswith("error: ") and fragment in line


def test_argument_errors_need_no_torch(tmp_path):
    """Errors that need no model come back without importing torch (seconds on a cold start)."""
    code = f"""
import sys
from transformer_viewer.viewer.cli.main import main
tmp = {str(tmp_path)!r}
cases = [["export", "--prompt", "x", "--scale", "0", "--out", tmp + "/x.png"],
         ["export", "--prompt", "x", "--out", tmp + "/missing/x.png"],
         ["predict", "--prompt", "x", "--mask", "a.b"],
         ["predict", "--prompt", "x", "--top-k", "0"],
         ["train", "--data", "x.txt", "--out", tmp + "/missing/m.safetensors"],
         ["train", "--data", "x.txt", "--out", tmp + "/m.safetensors", "--resume"],
         ["train", "--data", "x.txt", "--out", tmp + "/m.safetensors", "--n-embd", "15"],
         ["patch", "--clean", "x", "--corrupted", "y", "--out", tmp + "/x.txt"],
         ["predict", "--prompt", "x", "--sae", "x", "--clamp", "1x"],
         ["features", "--prompt", "x", "--sae", "x", "--out", tmp + "/f.txt"]]
codes = [main(argv) for argv in cases]
assert codes == [2] * len(cases), codes
assert "torch" not in sys.modules, "torch was imported"
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert len(done.stderr.strip().splitlines()) == 10 and "Traceback" not in done.stderr


def test_heads_text_that_is_binary(tiny_ckpt, tmp_path, capsys):
    junk = tmp_path / "junk.txt"
    junk.write_bytes(bytes(range(256)) * 16)
    assert main(["heads", tiny_ckpt, "--device", "cpu", "--text", str(junk)]) == 2
    assert "junk.txt: not a text file" in one_error(capsys)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\u00e9 ".encode("latin-1") * 50)  # every fifth byte undecodable as UTF-8
    assert main(["heads", tiny_ckpt, "--device", "cpu", "--text", str(latin)]) == 2
    assert "not UTF-8 text" in one_error(capsys)


def test_predict_json_records_mask_and_ablation(tiny_ckpt, capsys):
    assert main(["predict", tiny_ckpt, "--device", "cpu", "--prompt", "The cat sat", "--json",
                 "--mask", "1.0", "0.1", "--ablation", "mean"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mask"] == ["0.1", "1.0"] and doc["ablation"] == "mean"
    assert main(["predict", "--checkpoint", tiny_ckpt, "--device", "cpu", "--prompt", "The cat sat", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mask"] == [] and doc["ablation"] is None


def test_heads_json_honours_top_and_sink_is_first_token(tiny_ckpt, capsys):
    common = ["heads", tiny_ckpt, "--device", "cpu", "--json", "--batch", "1", "--top", "2"]
    assert main([*common, "--sort", "sink"]) == 0
    sink = json.loads(capsys.readouterr().out)
    assert main([*common, "--sort", "first-token"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert len(sink["heads"]) == 2 and "scores" not in sink  # no matrix of every head beside the top 2
    assert [(h["layer"], h["head"]) for h in sink["heads"]] == [(h["layer"], h["head"]) for h in first["heads"]]
    values = [h["first_token"] for h in sink["heads"]]
    assert values == sorted(values, reverse=True)


def test_heads_closing_line_names_each_head_once(tiny_ckpt, capsys):
    assert main(["heads", tiny_ckpt, "--device", "cpu", "--batch", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("highest: prev-token L")
    parts = last.removeprefix("highest: ").split(", ")
    assert len(parts) == 4 and all(" = " in p and "(" not in p for p in parts)


def test_scan_prints_no_progress_bar_into_a_log(tiny_ckpt, capsys):
    assert main(["scan", tiny_ckpt, "--device", "cpu", "--prompt", "The cat sat on the"]) == 0
    err = capsys.readouterr().err
    assert "head/s" not in err and "\r" not in err


@pytest.mark.parametrize("name, option", [("predict", "--top-k"), ("heads", "--top"), ("export", "--layer")])
def test_numbers_are_ascii_digits_only(name, option, capsys):
    """`int` reads '٣' as 3 and refuses '²', which `isdigit` accepts: every int option wants ASCII."""
    parser = build_parser(name)
    rest = REQUIRED.get(name, [])
    assert getattr(parser.parse_args([*rest, option, "12"]), option[2:].replace("-", "_")) == 12
    for typed in ("٣", "²", "1٣"):
        with pytest.raises(SystemExit):
            parser.parse_args([*rest, option, typed])
        assert f"invalid int value: {typed!r}" in capsys.readouterr().err
