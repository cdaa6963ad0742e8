"""A Hugging Face folder: `config.json` plus `model.safetensors` or `pytorch_model.bin` (or
their sharded `*.index.json` forms).

GPT-2 is read here: keys come with the `transformer.` prefix (GPT2LMHeadModel) or without it
(GPT2Model); the four Conv1D projections are transposed into Linear layout; a missing
`lm_head.weight` is the tied embedding; `attn.bias` / `attn.masked_bias` buffers are ignored.
The other decoder families (Llama, Qwen, Mistral, Gemma, Phi-3, OLMo, GPT-NeoX, GPT-J) map in
`hf_families/`. Any other architecture is refused: its weights would load into the wrong
computation.
"""

from __future__ import annotations

import dataclasses
import os
from functools import partial

import torch

from transformer_viewer.model.checkpoints.expected_state import check_size
from transformer_viewer.model.checkpoints.formats import (
    gpt2_layout,
    hf_families,
    pickle_safe,
    safetensors_file,
    schema,
    shard_index,
)
from transformer_viewer.model.checkpoints.formats.hf_families.common import Fields
from transformer_viewer.model.checkpoints.formats.schema import describe_value
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import folder_files, regular_file, untrusted_json
from transformer_viewer.model.tokenizers.tokenizer_files import check_config_token_ids, folder_tokenizer

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
# HF activation_function -> ours. "gelu_new" and "gelu_pytorch_tanh" are the same tanh curve.
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def is_hf_folder(folder: str) -> bool:
    """A folder with anything called config.json: a config.json that is no regular file (a pipe,
    a folder, a broken link) is then read and refused as what it is, not taken for no model."""
    return regular_file.exists(os.path.join(folder, "config.json"))


def weights_file(folder: str) -> str | None:
    for name in WEIGHT_FILES:
        if regular_file.exists(os.path.join(folder, name)):
            return folder_files.check_inside(folder, os.path.join(folder, name))
    return None


def read_folder(folder: str, name: str | None = None, weights: str | None = None,
                raw: dict | None = None) -> tuple[GPTConfig, dict[str, torch.Tensor], dict]:
    """`weights` names the file to use when the user gave one (else the folder's first of
    WEIGHT_FILES); `raw` is its state dict when the caller has loaded it already."""
    hf = read_config_json(folder)
    hf_families.refuse_quantized(hf, folder)
    found = hf_families.family_of(hf, folder)  # None: GPT-2
    config = config_from_hf(hf, folder) if found is None else hf_families.config_for(hf, folder, *found)

    check_size(config, folder)  # a model too large for this machine is refused before its weights are read
    check_config_token_ids(hf, folder)
    weights = weights or weights_file(folder)
    if weights is None:
        raise CheckpointError(f"{folder}: has config.json but no weights (neither model.safetensors nor "
                              "pytorch_model.bin); copy or download the weights into the folder")
    raw = load_weights(weights, skip=found[1].skip if found else ()) if raw is None else raw
    if found is None:
        state, names = gpt2_layout.to_ours(raw, conv1d=True)
        if not config.tie_embeddings and "lm_head.weight" not in state:
            raise CheckpointError(f"{folder}: config.json says tie_word_embeddings=false but the weights have no "
                                  "lm_head.weight; the head is missing")
        key_name = gpt2_layout.file_namer(names, raw.keys())
    else:
        state, names = hf_families.state_for(raw, config, folder, found[1])
        key_name = lambda k: names.get(k, k)  # noqa: E731
    if config.tie_embeddings and "lm_head.weight" in state:
        if gpt2_layout.tied(state):
            del state["lm_head.weight"]  # an equal copy: the embedding is the head
        else:
            # A tied config, but the file holds a head of its own: transformers ties only equal
            # tensors and keeps the file's head, and so do we.
            config = dataclasses.replace(config, tie_embeddings=False)
    info = {
        "name": name or os.path.basename(os.path.normpath(folder)),
        # "gpt2" (GPT-2's built-in tokenizer), or this folder, whose tokenizer.json is loaded with the model.
        "tokenizer": folder_tokenizer(folder, hf),
        "training": {"source_format": "huggingface", "architectures": list(hf.get("architectures") or []),
                     "family": "GPT-2" if found is None else found[1].name},
        "key_name": key_name,
    }
    return config, state, info


def read_config_json(folder: str) -> dict:
    """config.json, parsed with bounds (size, nesting, numbers): it is as untrusted as the weights."""
    path = folder_files.check_inside(folder, os.path.join(folder, "config.json"))
    return untrusted_json.read_object(path, "restore the model's config.json")


def config_from_hf(hf: dict, folder: str) -> GPTConfig:
    """GPTConfig from a GPT2Config dict; anything we would compute differently is refused."""
    model_type = hf.get("model_type")
    arch = ", ".join(hf.get("architectures") or []) or "unknown architecture"
    if model_type != "gpt2":
        raise CheckpointError(f"{folder}: config.json says model_type {model_type!r} ({arch}); only the GPT-2 "
                              "family (model_type \"gpt2\": gpt2, distilgpt2, gpt2-medium, ...) is supported")
    f = Fields(hf, folder, arch)  # every value type-checked: the file is untrusted
    act = f.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise CheckpointError(f"{folder}: activation_function {describe_value(act)} is not supported; "
                              f"use one of {', '.join(ACTIVATIONS)}")
    for field, ok, why in (
        ("scale_attn_weights", True, "unscaled attention"),
        ("scale_attn_by_inverse_layer_idx", False, "attention scaled by 1/layer"),
        ("add_cross_attention", False, "cross-attention"),
    ):
        if f.flag(field, ok) != ok:
            raise CheckpointError(f"{folder}: config.json sets {field}={hf[field]} ({why}), which this decoder "
                                  "does not implement")
    n_inner = hf.get("n_inner")
    try:
        return GPTConfig(
            block_size=f.int("n_positions", f.int("n_ctx", 1024)),
            vocab_size=f.int("vocab_size", 50257),
            n_layer=f.int("n_layer", 12),
            n_head=f.int("n_head", 12),
            n_embd=f.int("n_embd", 768),
            dropout=f.num("resid_pdrop", 0.0),
            bias=True,
            activation=ACTIVATIONS[act],
            positional="learned",
            tie_embeddings=f.flag("tie_word_embeddings", True),
            layer_norm_eps=f.num("layer_norm_epsilon", 1e-5),
            n_mlp=f.int("n_inner") if n_inner is not None else 0,
        )
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{folder}: bad config.json: {e}") from None


def load_weights(path: str, skip: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """The file's tensors by name, less those whose names start with a `skip` prefix (parts of
    the checkpoint the decoder does not run, such as a vision tower), never read from a
    safetensors file."""
    if path.endswith(".index.json"):
        return shard_index.load_shards(path, partial(load_safetensors, skip=skip), partial(_load_pickled, skip=skip))
    if path.endswith(".safetensors"):
        return load_safetensors(path, skip)
    return _load_pickled(path, skip)


def _load_pickled(path: str, skip: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    obj = pickle_safe.load(path)
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: holds a {type(obj).__name__}, not a state dict of tensors")
    schema.check_state_names(path, obj)
    return {k: v for k, v in obj.items() if not k.startswith(skip)} if skip else obj


def load_safetensors(path: str, skip: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file, read without mapping it (safetensors_file)."""
    return safetensors_file.read_tensors(path, skip)
