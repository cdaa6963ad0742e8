"""Loading family checkpoints the way they are published: sharded safetensors with their index,
bfloat16/float16 weights computed in float32, a model found by name in the local Hugging Face
cache (never downloaded), and the source tensors released as they are converted."""

from __future__ import annotations

import os

import pytest
import torch

from tests.model.hf_family_models import build, save
from tests.model.test_parity_families import load
from transformer_viewer.model.checkpoint import build_model
from transformer_viewer.model.formats import detect, huggingface

T = 12


def _ids(hf):
    return torch.randint(3, hf.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(5))


def test_sharded_safetensors_with_index(tmp_path):
    hf = build("qwen2")
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists() and len(list(tmp_path.glob("*-of-*"))) > 2
    loaded = load(tmp_path)
    ids = _ids(hf)
    with torch.no_grad():
        assert (loaded.model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights_compute_in_float32(tmp_path, dtype):
    hf = build("gemma2")
    hf.to(dtype).save_pretrained(tmp_path)
    loaded = load(tmp_path)
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    reference = hf.to(torch.float32)  # the same rounded weights, computed in float32
    ids = _ids(hf)
    with torch.no_grad():
        assert (loaded.model(ids)[0] - reference(ids).logits).abs().max().item() <= 1e-4


def test_source_tensors_are_released_as_they_are_converted(tmp_path):
    hf = build("phi3")
    save(hf, str(tmp_path))
    raw = huggingface.load_weights(str(tmp_path / "model.safetensors"))
    n = len(raw)
    config, state, _info = huggingface.read_folder(str(tmp_path), raw=raw)
    assert n > 10 and raw == {}  # every tensor was taken out of the file's dict: no second copy stays
    assert all(t.dtype == torch.float32 for t in state.values())
    build_model(config, state, str(tmp_path))


def test_a_cached_model_opens_by_name_offline(tmp_path, monkeypatch):
    hf = build("qwen3")
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "snapshots" / "0123abcd"
    blobs = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "blobs"
    save(hf, str(blobs))
    snapshot.mkdir(parents=True)
    for name in os.listdir(blobs):  # the hub's layout: snapshot files are links into blobs/
        os.symlink(os.path.join("..", "..", "blobs", name), snapshot / name)
    (tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "refs").mkdir()
    (tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    fmt, reader = detect.find_reader("Qwen/Qwen2.5-0.5B")
    config, state, info = reader("Qwen/Qwen2.5-0.5B")
    assert fmt == "huggingface" and info["name"] == "Qwen/Qwen2.5-0.5B" and info["training"]["family"] == "Qwen3"
    assert info["tokenizer"] == str(snapshot)  # the folder whose tokenizer.json the model uses
    model = build_model(config, state, "Qwen/Qwen2.5-0.5B")
    ids = _ids(hf)
    with torch.no_grad():
        assert (model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


def test_saved_rotary_tables_are_ignored(tmp_path):
    """Older Llama saves carry each layer's rotary_emb.inv_freq buffer; we compute our own."""
    from safetensors.torch import load_file, save_file

    hf = build("llama")
    save(hf, str(tmp_path))
    path = str(tmp_path / "model.safetensors")
    state = load_file(path)
    state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    save_file(state, path, metadata={"format": "pt"})
    ids = _ids(hf)
    with torch.no_grad():
        assert (load(tmp_path).model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4
