"""`transformer-viewer info` and `predict`: text and JSON output, head masks, and errors as one
line on stderr with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.helpers.cli import cli, error_line
from tests.helpers.models import TINY, hf_config, hf_model, nanogpt_checkpoint, save_tiny
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import bundled_checkpoint_path, load_checkpoint
from transformer_viewer.model.kernels.inference import choose_strategy, installed_inference
from transformer_viewer.model.kernels.linear import Linear
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer

PROMPT = "The cat sat on the mat because"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny.safetensors"
    save_tiny(path, seed=31)
    return str(path)


def assert_one_line_error(rc, out, err):
    assert rc == 2
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# -- info -----------------------------------------------------------------------------------
def test_info_text(capsys, ckpt):
    rc, out, _ = cli(capsys, "info", ckpt, "--device", "cpu")
    assert rc == 0
    assert "format      native" in out
    assert "2 layers, 4 heads, n_embd 32" in out and "vocab 50257" in out
    n = load_checkpoint(ckpt).n_params
    assert f"parameters  {n:,}" in out
    assert "tokenizer   gpt2" in out
    assert "kernels     gemm=" in out


class Terminal:
    """stderr as a terminal sees it: isatty, everything written kept."""

    def __init__(self):
        self.written = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.written.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_a_slow_load_shows_a_bar_on_a_terminal_and_leaves_no_trace(capsys, ckpt, monkeypatch):
    from transformer_viewer.viewer.cli import common

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(common, "BAR_AFTER_S", 0.0)  # as if the load were slow
    rc, out, _ = cli(capsys, "info", ckpt, "--device", "cpu")
    shown = "".join(terminal.written)
    n = len(list(load_checkpoint(ckpt).model.parameters()))
    assert rc == 0 and "checking the weights" in shown and f"{n}/{n}" in shown
    assert shown.split("\r")[-2].strip() == "" and shown.endswith("\r")  # cleared: the terminal is as it was
    assert "format      native" in out  # the bar went to stderr, the answer to stdout


def test_a_quick_load_shows_no_bar(capsys, ckpt, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    rc, _, _ = cli(capsys, "info", ckpt, "--device", "cpu")
    assert rc == 0 and terminal.written == []


def test_info_json(capsys, ckpt):
    rc, out, _ = cli(capsys, "info", ckpt, "--json", "--device", "cpu")
    assert rc == 0
    facts = json.loads(out)
    assert facts["format"] == "native" and facts["tokenizer"] == "gpt2"
    assert facts["config"] == TINY.to_dict()
    assert facts["n_params"] == load_checkpoint(ckpt).n_params
    assert facts["checkpoint"] == ckpt
    assert facts["kernel_path"] == choose_strategy(load_checkpoint(ckpt).model).kernel_path


def test_info_of_other_formats(capsys, tmp_path):
    hf = hf_model(hf_config(vocab_size=300, activation_function="gelu"), seed=32)
    hf.save_pretrained(tmp_path / "hf")
    torch.save(nanogpt_checkpoint(hf), tmp_path / "ckpt.pt")
    for source, fmt in ((tmp_path / "hf", "huggingface"), (tmp_path / "ckpt.pt", "nanogpt")):
        rc, out, _ = cli(capsys, "info", str(source), "--json", "--device", "cpu")
        assert rc == 0
        facts = json.loads(out)
        assert facts["format"] == fmt and facts["config"]["vocab_size"] == 300
    rc, out, _ = cli(capsys, "info", str(tmp_path / "ckpt.pt"), "--device", "cpu")
    assert "format      nanogpt" in out and "iter_num=5000" in out


def test_info_without_checkpoint_uses_the_bundled_model(capsys):
    rc, out, err = cli(capsys, "info", "--device", "cpu")
    if os.path.exists(bundled_checkpoint_path()):
        assert rc == 0 and "format      native" in out
    else:
        assert "bundled model" in assert_one_line_error(rc, out, err)


def test_info_errors(capsys, tmp_path):
    line = assert_one_line_error(*cli(capsys, "info", str(tmp_path / "nope.safetensors")))
    assert "file not found" in line
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    assert "unknown checkpoint format" in assert_one_line_error(*cli(capsys, "info", str(tmp_path / "junk.pt")))


# -- predict --------------------------------------------------------------------------------
def _expected(ckpt, mask=None, ablation="zero", position=None, top_k=10):
    s = Session(load_checkpoint(ckpt))  # installs the kernels the command runs: the same rounding
    s.set_prompt(PROMPT)
    return s.run(mask, ablation=ablation, position=position, top_k=top_k).next


def test_predict_json_shape_and_values(capsys, ckpt):
    rc, out, _ = cli(capsys, "predict", "--checkpoint", ckpt, "--prompt", PROMPT, "--json", "--top-k", "5",
                     "--device", "cpu")
    assert rc == 0
    result = json.loads(out)
    assert set(result) == {"tokens", "position", "mask", "ablation", "clamps", "top"}
    assert result["mask"] == [] and result["ablation"] is None and result["clamps"] == []
    ids = Tokenizer().encode(PROMPT)
    assert [t["id"] for t in result["tokens"]] == ids
    assert "".join(t["text"] for t in result["tokens"]) == PROMPT
    assert all(set(t) == {"id", "text", "special"} for t in result["tokens"])
    assert result["position"] == len(ids) - 1
    assert len(result["top"]) == 5 and all(set(t) == {"id", "token", "prob", "logit"} for t in result["top"])
    nxt = _expected(ckpt, top_k=5)
    assert [t["id"] for t in result["top"]] == nxt.top_ids.tolist()
    np.testing.assert_allclose([t["prob"] for t in result["top"]], nxt.top_probs, rtol=1e-6)
    np.testing.assert_allclose([t["logit"] for t in result["top"]], nxt.top_logits, rtol=1e-6)
    assert [t["token"] for t in result["top"]] == [Tokenizer().decode([i]) for i in nxt.top_ids]
    probs = [t["prob"] for t in result["top"]]
    assert probs == sorted(probs, reverse=True)


def test_commands_that_run_the_model_install_its_kernels_and_info_does_not(ckpt):
    from argparse import Namespace

    from transformer_viewer.viewer.cli.common import load_from_args

    args = Namespace(checkpoint=ckpt, checkpoint_positional=None, device="cpu")
    model = load_from_args(args, for_inference=False).model
    assert installed_inference(model) is None and not any(isinstance(m, Linear) for m in model.modules())
    model = load_from_args(args, for_inference=True).model
    installed = installed_inference(model)
    assert installed is not None and installed.strategy == choose_strategy(model)
    if installed.strategy.gemm == "onednn":  # the blocks' layers packed once for oneDNN's kernel
        layers = [m for m in model.blocks.modules() if isinstance(m, torch.nn.Linear)]
        assert all(isinstance(m, Linear) and (m._packed is not None) == m.can_pack() for m in layers)


def test_predict_refuses_logits_that_overflow_in_one_line(capsys, tmp_path):
    """Finite weights can still overflow float32 (3e38 * 4): the logits are NaN, which is no
    answer: one line and exit 2, with or without --json (and never JSON's invalid NaN)."""
    from tests.helpers.models import tiny_gpt
    from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint

    model = tiny_gpt(TINY, 5)
    with torch.no_grad():
        model.blocks[0].mlp.c_proj.weight.fill_(3e38)
    path = tmp_path / "overflowing.safetensors"
    save_checkpoint(model, str(path))
    rc, out, err = cli(capsys, "predict", str(path), "--prompt", PROMPT, "--json", "--top-k", "3")
    assert "not finite" in error_line(rc, out, err) and out == ""


def test_predict_with_masks_position_and_mean_ablation(capsys, ckpt):
    argv = ["predict", "--checkpoint", ckpt, "--prompt", PROMPT, "--json", "--device", "cpu", "--position", "3"]
    _, clean_out, _ = cli(capsys, *argv)
    rc, out, _ = cli(capsys, *argv, "--mask", "1.2", "0.0", "--mask", "1.3", "--ablation", "mean")
    assert rc == 0
    clean, masked = json.loads(clean_out), json.loads(out)
    assert masked["position"] == clean["position"] == 3
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 2] = mask[0, 0] = mask[1, 3] = True
    nxt = _expected(ckpt, mask, ablation="mean", position=3)
    assert [t["id"] for t in masked["top"]] == nxt.top_ids.tolist()
    np.testing.assert_allclose([t["prob"] for t in masked["top"]], nxt.top_probs, rtol=1e-6)
    assert max(abs(a["prob"] - b["prob"]) for a, b in zip(clean["top"], masked["top"], strict=True)) > 1e-4


def test_predict_whole_layer_mask(capsys, ckpt):
    rc, out, _ = cli(capsys, "predict", "--checkpoint", ckpt, "--prompt", PROMPT, "--json", "--mask", "0.*",
                     "--device", "cpu")
    assert rc == 0
    mask = np.zeros((2, 4), dtype=bool)
    mask[0] = True
    assert [t["id"] for t in json.loads(out)["top"]] == _expected(ckpt, mask).top_ids.tolist()


def test_predict_text(capsys, ckpt):
    rc, out, _ = cli(capsys, "predict", "--checkpoint", ckpt, "--prompt", PROMPT, "--top-k", "3", "--mask", "1.1",
                     "--device", "cpu")
    assert rc == 0
    assert "0:The 1:·cat 2:·sat" in out
    assert "ablated heads (zero): 1.1" in out
    ranked = [line for line in out.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")]
    assert len(ranked) == 3 and all("p=" in line and "logit=" in line for line in ranked)


@pytest.mark.parametrize("extra,expected", [
    (["--mask", "7.0"], "layer 7 does not exist"),
    (["--mask", "1.9"], "head 9 does not exist"),
    (["--mask", "one.two"], "LAYER.HEAD"),
    (["--position", "99"], "position 99"),
    (["--top-k", "0"], "--top-k"),
])
def test_predict_errors(capsys, ckpt, extra, expected):
    line = assert_one_line_error(*cli(capsys, "predict", "--checkpoint", ckpt, "--prompt", PROMPT, "--device", "cpu",
                                      *extra))
    assert expected in line


def test_predict_empty_prompt_and_missing_checkpoint(capsys, ckpt, tmp_path):
    assert "empty" in assert_one_line_error(*cli(capsys, "predict", "--checkpoint", ckpt, "--prompt", ""))
    line = assert_one_line_error(*cli(capsys, "predict", "--checkpoint", str(tmp_path / "x.pt"), "--prompt", "hi"))
    assert "file not found" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_predict_cuda_without_a_gpu(capsys, ckpt):
    line = assert_one_line_error(*cli(capsys, "predict", "--checkpoint", ckpt, "--prompt", "hi", "--device", "cuda"))
    assert "CUDA" in line


def test_console_error_is_one_line_without_traceback(tmp_path):
    """The real entry point, as a user runs it; and the CLI modules import without torch."""
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-m", "transformer_viewer.viewer.cli.main", "predict", "--checkpoint",
                           str(tmp_path / "missing.pt"), "--prompt", "hi"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stdout == ""
    probe = ("import sys, transformer_viewer.viewer.cli.info, transformer_viewer.viewer.cli.predict; "
             "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# -- what info calls training ----------------------------------------------------------------
def test_info_names_training_files_by_their_file_names(capsys, tmp_path):
    """The folders in a training record were the training machine's: info shows file names."""
    from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
    from transformer_viewer.model.decoder.gpt import GPT

    record = {"command": ["transformer-viewer", "train", "--data", "/home/someone/corpora/plays.txt",
                          "C:\\Users\\someone\\psalms.txt", "--out", "runs/7/model.safetensors", "--lr", "3e-3"],
              "data": [{"path": "/home/someone/corpora/plays.txt", "tokens": 1200, "sha256": "ab"}],
              "resumed": [{"from_step": 5, "command": ["transformer-viewer", "train", "--out", "/tmp/x/m.safetensors"]}],
              "steps": 10}
    path = tmp_path / "trained.safetensors"
    save_checkpoint(GPT(TINY), str(path), training=record)
    rc, out, _ = cli(capsys, "info", str(path), "--device", "cpu")
    assert rc == 0
    assert "trained on  plays.txt (1,200 tokens)" in out
    assert ("command     transformer-viewer train --data plays.txt psalms.txt --out model.safetensors --lr 3e-3"
            in out)
    assert "someone" not in out and "runs/" not in out
    rc, out, _ = cli(capsys, "info", str(path), "--json", "--device", "cpu")
    training = json.loads(out)["training"]
    assert training["command"][3:5] == ["plays.txt", "psalms.txt"] and training["data"][0]["path"] == "plays.txt"
    assert training["resumed"][0]["command"][-1] == "m.safetensors" and training["steps"] == 10


def test_info_of_the_bundled_model_shows_no_training_machine_path(capsys):
    rc, out, _ = cli(capsys, "info", "--device", "cpu")
    assert rc == 0 and "trained on  shakespeare.txt.xz" in out and "kjv.txt.xz" in out
    rc, out, _ = cli(capsys, "info", "--json", "--device", "cpu")
    training = json.loads(out)["training"]
    files = [*training["command"], *(d["path"] for d in training["data"])]
    assert "shakespeare.txt.xz" in training["command"]
    assert not [f for f in files if "/" in f or "\\" in f]


def test_a_hugging_face_folder_is_not_called_training(capsys, tmp_path):
    hf = hf_model(hf_config(vocab_size=300), seed=33)
    hf.save_pretrained(tmp_path / "hf")
    rc, out, _ = cli(capsys, "info", str(tmp_path / "hf"), "--device", "cpu")
    assert rc == 0 and "family      GPT-2" in out and "format      huggingface" in out
    assert "class       GPT2LMHeadModel (config.json's architectures)" in out
    assert "training" not in out and "source_format" not in out
    rc, out, _ = cli(capsys, "info", str(tmp_path / "hf"), "--json", "--device", "cpu")
    facts = json.loads(out)
    assert facts["training"] == {} and facts["read"] == {"architectures": ["GPT2LMHeadModel"]}
    assert facts["family"] == "GPT-2" and facts["format"] == "huggingface"


def test_prompt_bytes_that_are_not_utf8_are_replaced_with_one_note(ckpt, capsys):
    """argv bytes that are not UTF-8 reach Python as lone surrogates: read as U+FFFD, said once."""
    undecodable = b"The caf\xe9 \xff sat".decode("utf-8", "surrogateescape")
    rc, out, err = cli(capsys, "predict", "--checkpoint", ckpt, "--prompt", undecodable, "--json", "--device", "cpu")
    assert rc == 0, err
    assert err.strip() == "note: --prompt holds 2 bytes that are not UTF-8; each is read as U+FFFD, the replacement character"
    replaced = cli(capsys, "predict", "--checkpoint", ckpt, "--prompt", "The caf\ufffd \ufffd sat", "--json",
                   "--device", "cpu")[1]
    assert json.loads(out) == json.loads(replaced)
