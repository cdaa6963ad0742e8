"""A model's family and switches, as `info` prints them: a Hugging Face folder's architecture,
or for our own checkpoints the training preset they match."""

from __future__ import annotations

import json

import torch

from tests.helpers.families import load_folder
from tests.helpers.hf_family_models import build, save
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.decoder.config import PRESETS, GPTConfig
from transformer_viewer.model.decoder.families import family_name, switches
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.viewer.cli.main import main

SIZE = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=300)


def test_our_checkpoints_are_named_by_preset():
    assert family_name(GPTConfig(**SIZE)) == "GPT-2-style" and switches(GPTConfig(**SIZE)) == []
    llama = GPTConfig(**SIZE, **PRESETS["llama"])
    assert family_name(llama) == "Llama-style"
    assert switches(llama) == ["rotary (neox, base 10000)", "RMSNorm", "gated MLP (silu)"]
    assert family_name(llama.replace(block="parallel")) == "custom"


def test_a_folder_names_its_family_and_its_switches(tmp_path):
    loaded = load_folder(save(build("gemma2"), str(tmp_path)))
    assert family_name(loaded.config, loaded.training) == "Gemma 2"
    got = switches(loaded.config)
    for part in ("RMSNorm (1 + w)", "norms before and after each sublayer", "2 key/value heads for 4 query heads",
                 "softmax scale 0.2236", "attention soft-cap 3", "sliding window 6 on 2 of 3 layers",
                 "gated MLP (gelu_tanh)", "embedding x sqrt(n_embd)", "logit soft-cap 4"):
        assert part in got


def test_info_prints_family_and_switches(tmp_path, capsys):
    torch.manual_seed(0)
    path = str(tmp_path / "llama.safetensors")
    save_checkpoint(GPT(GPTConfig(**SIZE, **PRESETS["llama"], n_kv_head=1)), path)
    assert main(["info", path]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("family")][0]
    assert "Llama-style" not in line and "custom" in line and "1 key/value heads for 2 query heads" in line
    assert main(["info", path, "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["family"] == "custom" and "RMSNorm" in facts["switches"]


def test_the_refusal_names_every_supported_architecture():
    """The list an unsupported architecture's line gives: every family, by its short name under
    its suffix (the line must stay short enough for a dialog)."""
    from transformer_viewer.model.checkpoints.formats import hf_families

    said = hf_families.SUPPORTED
    for arch in hf_families.FAMILIES:
        short = arch.removesuffix("ForCausalLM").removesuffix("ForConditionalGeneration")
        assert short != arch and f" {short}," in f" {said.replace(' (', ',')}", arch
    assert said.startswith("GPT2, Llama,") and len(said) < 250
