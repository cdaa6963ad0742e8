"""Training the family switches: the Llama preset (rotary + RMSNorm + SwiGLU, grouped-query
attention) learns, saves in our native format with its config, reloads with equal logits and
resumes; the single switches reach the config."""

import pytest
import torch

from tests.helpers.training import write_text
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.viewer.cli.main import main

FLAGS = ["--n-layer", "2", "--n-head", "4", "--n-embd", "32", "--block-size", "16", "--batch-size", "8",
         "--warmup", "2", "--eval-every", "15", "--eval-batches", "2", "--val-fraction", "0.2", "--device", "cpu",
         "--seed", "3", "--lr", "1e-2"]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return write_text(tmp_path_factory.mktemp("fam-data") / "t.txt", n=120)


def test_llama_preset_learns_saves_reloads_and_resumes(text, tmp_path, capsys):
    out = tmp_path / "llama.safetensors"
    flags = [*FLAGS, "--arch", "llama", "--n-kv-head", "2", "--rope-base", "5000", "--steps", "30"]
    assert main(["train", "--data", text, "--out", str(out), *flags]) == 0
    capsys.readouterr()
    loaded = load_checkpoint(str(out))
    c = loaded.config
    assert (c.positional, c.norm, c.mlp, c.activation, c.bias) == ("rotary", "rmsnorm", "gated", "silu", False)
    assert (c.n_kv_head, c.rope_base, c.n_mlp) == (2, 5000.0, 96)
    assert loaded.model.blocks[0].attn.c_attn.weight.shape == ((4 + 2 * 2) * 8, 32)
    history = loaded.training["history"]
    unigram = loaded.training["unigram_val_loss"]
    assert history[-1]["val_loss"] < history[0]["val_loss"] and history[-1]["val_loss"] < unigram

    # A fresh GPT of the saved config with the saved weights computes the same logits as the loader's.
    fresh = GPT(c).eval()
    fresh.load_state_dict(loaded.model.state_dict())
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(fresh(ids)[0], loaded.model(ids)[0])
        again = load_checkpoint(str(out)).model(ids)[0]
        assert torch.equal(again, loaded.model(ids)[0])

    more = [f if f != "30" else "34" for f in flags]
    assert main(["train", "--data", text, "--out", str(out), *more, "--resume"]) == 0
    assert "at step 30" in capsys.readouterr().err
    resumed = load_checkpoint(str(out))
    assert resumed.training["steps"] == 34 and resumed.config == c


def test_single_switches_reach_the_config(text, tmp_path, capsys):
    out = tmp_path / "s.safetensors"
    flags = [*FLAGS, "--steps", "2", "--positional", "rotary", "--norm", "rmsnorm", "--head-dim", "16",
             "--n-kv-head", "1", "--mlp", "gated", "--activation", "gelu_tanh", "--n-mlp", "40"]
    assert main(["train", "--data", text, "--out", str(out), *flags]) == 0
    capsys.readouterr()
    c = load_checkpoint(str(out)).config
    assert (c.positional, c.norm, c.head_dim, c.n_kv_head, c.mlp, c.n_mlp, c.bias) == (
        "rotary", "rmsnorm", 16, 1, "gated", 40, True)


@pytest.mark.parametrize("extra, message", [
    (["--n-kv-head", "3"], "n_kv_head"),
    (["--n-kv-head", "-1"], "--n-kv-head"),
    (["--arch", "llama", "--rope-base", "nan"], "rope_base"),
    (["--arch", "llama", "--head-dim", "3"], "rotary"),
])
def test_bad_family_flags_are_one_line_errors(text, tmp_path, capsys, extra, message):
    out = tmp_path / "e.safetensors"
    assert main(["train", "--data", text, "--out", str(out), *FLAGS, "--steps", "2", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and message in err[-1]
    assert not out.exists()
