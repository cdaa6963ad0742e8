"""Malformed and hostile Hugging Face folders of the decoder families: config values of the
wrong type or size, architectures and switches we refuse, weights that do not fit the config,
and shard indexes that point outside their folder. Each `FOLDERS` entry builds one folder and
names a fragment of the one-line error it must give."""

from __future__ import annotations

import json
import os

import torch
from safetensors.torch import load_file, save_file

from tests.helpers.hf_family_models import build


def llama_folder(folder: str, config_edit=None, state_edit=None, name: str = "smollm_tied") -> str:
    """A tiny saved Llama-family model with `config_edit(cfg)` / `state_edit(state)` applied."""
    os.makedirs(folder, exist_ok=True)
    build(name).save_pretrained(folder)
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    if config_edit:
        config_edit(cfg)
    with open(path, "w") as f:
        json.dump(cfg, f)
    if state_edit:
        weights = os.path.join(folder, "model.safetensors")
        state = load_file(weights)
        state_edit(state)
        save_file(state, weights, metadata={"format": "pt"})
    return folder


def _set(**changes):
    return lambda cfg: cfg.update(changes)


def _shard_outside(folder: str) -> str:
    llama_folder(folder)
    weights = os.path.join(folder, "model.safetensors")
    outside = os.path.join(os.path.dirname(folder), "outside.safetensors")
    os.replace(weights, outside)
    names = load_file(outside).keys()
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {k: "../outside.safetensors" for k in names}}, f)
    return folder


def _pop(key):
    return lambda s: s.pop(key)


def _add_qk_norm(s):
    s["model.layers.0.self_attn.q_norm.weight"] = torch.ones(8)


def _bad_k_shape(s):
    s["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(8, 31)


FOLDERS = {
    "mixtral": (_set(model_type="mixtral", architectures=["MixtralForCausalLM"]), "mixture-of-experts"),
    "qwen3_next": (_set(model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"]), "linear-attention"),
    "gemma4": (_set(model_type="gemma4_text", architectures=["Gemma4ForCausalLM"]), "Gemma 4's per-layer inputs"),
    "bert": (_set(model_type="bert", architectures=["BertForMaskedLM"]), "supported: GPT2, Llama, Mistral"),
    "moe_field": (_set(num_local_experts=8), "mixture-of-experts layers (num_local_experts=8"),
    "alibi": (_set(alibi=True), "ALiBi"),
    "rope_dynamic_shrinking": (_set(rope_parameters={"rope_type": "dynamic", "factor": 0.5, "rope_theta": 1e4}),
                               "dynamic rope scaling's factor must be between 1 and 1024, got 0.5"),
    "rope_dynamic_huge": (_set(rope_parameters={"rope_type": "dynamic", "factor": 1e300, "rope_theta": 1e4}),
                          "factor must be a number within float32's range, got 1e+300"),
    "rope_longrope_no_factors": (lambda c: (c.pop("rope_parameters"), c.update(rope_scaling={"type": "longrope"})),
                                 "longrope's short_factor must be a list of positive numbers"),
    "rope_longrope_huge_list": (_set(rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 4,
                                                      "long_factor": [1.0] * 100_000}),
                                "longrope's long_factor must be a list of positive numbers"),
    "rope_longrope_wrong_length": (_set(rope_parameters={"rope_type": "longrope", "short_factor": [1.0, 2.0],
                                                         "long_factor": [1.0, 2.0]}),
                                   "rope_short_factor has 2 entries for the 4 rotating pairs"),
    "rope_longrope_zero_factor": (_set(rope_parameters={"rope_type": "longrope", "short_factor": [1.0, 0.0, 1.0, 1.0],
                                                        "long_factor": [1.0] * 4}),
                                  "longrope's short_factor must be a list of positive numbers"),
    "phi3_dynamic": (_set(model_type="phi3", architectures=["Phi3ForCausalLM"],
                          rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}),
                     "Phi3ForCausalLM with rope scaling 'dynamic' (Phi-3 takes longrope alone) is not supported"),
    "layers_string": (_set(num_hidden_layers="3"), "num_hidden_layers must be an integer"),
    "layers_huge": (_set(num_hidden_layers=10**9), "n_layer=1000000000 is larger than the supported"),
    "width_huge": (_set(hidden_size=1 << 30), "n_embd=1073741824 is larger"),
    "context_huge": (_set(max_position_embeddings=10**12), "block_size=1000000000000 is larger"),
    "kv_heads_bad": (_set(num_key_value_heads=3), "not a multiple of n_kv_head=3"),
    "theta_string": (_set(rope_parameters={"rope_type": "default", "rope_theta": "1e4"}), "rope_theta must be a positive number within float32's range, got '1e4'"),
    "eps_bool": (_set(rms_norm_eps=True), "rms_norm_eps must be a finite number"),
    "tie_string": (_set(tie_word_embeddings="yes"), "tie_word_embeddings must be true or false"),
    "activation": (_set(hidden_act="gelu_fast"), "activation 'gelu_fast'"),
    "rope_params_list": (_set(rope_parameters=[1, 2]), "rope_parameters must be an object"),
    "olmo_clip": (_set(model_type="olmo", architectures=["OlmoForCausalLM"], clip_qkv=8.0), "clip_qkv=8.0"),
    "gemma3_bidirectional": (_set(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"],
                                  use_bidirectional_attention=True), "use_bidirectional_attention"),
    "gptj_no_rotary_dim": (_set(model_type="gptj", architectures=["GPTJForCausalLM"], n_embd=32, n_head=4, n_layer=3,
                                rotary_dim=None), "rotary_dim null"),
    "olmo3_scaled_sliding": (_set(model_type="olmo3", architectures=["Olmo3ForCausalLM"], rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": 1e4},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}), "rope scaling on its sliding layers"),
    "smollm3_nope_string": (_set(model_type="smollm3", architectures=["SmolLM3ForCausalLM"], no_rope_layers="1,1,0"),
                            "no_rope_layers must list 1 (rotary) or 0 (none) for each of the 3 layers"),
    "smollm3_nope_short": (_set(model_type="smollm3", architectures=["SmolLM3ForCausalLM"], no_rope_layers=[1, 0]),
                           "no_rope_layers must list 1 (rotary) or 0 (none)"),
    "gemma3_multimodal_text_list": (_set(model_type="gemma3", architectures=["Gemma3ForConditionalGeneration"],
                                         text_config=[1]), "text_config must be an object"),
    "qwen_vl_text_list": (_set(model_type="qwen2_5_vl", architectures=["Qwen2_5_VLForConditionalGeneration"],
                               text_config="qwen2"), "text_config must be an object"),
    "qwen_vl_moe": (_set(model_type="qwen3_vl_moe", architectures=["Qwen3VLMoeForConditionalGeneration"]),
                    "mixture-of-experts"),
    "quantized_fp8": (_set(quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]}),
                      "config.json says the weights are quantized (fp8), which transformer-viewer cannot run"),
    "quantized_odd": (_set(quantization_config=[4]), "the weights are quantized, which transformer-viewer cannot run"),
    "mistral3_text_list": (_set(model_type="mistral3", architectures=["Mistral3ForConditionalGeneration"],
                                text_config=[1]), "text_config must be an object"),
    "mistral3_mixtral_text": (_set(model_type="mistral3", architectures=["Mistral3ForConditionalGeneration"],
                                   text_config={"model_type": "mixtral"}), "with a 'mixtral' (a string) text decoder"),
    "qwen_vl_mrope_scaled": (_set(model_type="qwen2_5_vl", architectures=["Qwen2_5_VLForConditionalGeneration"],
                                  rope_parameters=None, rope_theta=1e4, rope_scaling={"type": "dynamic", "factor": 2.0}),
                             "rope scaling 'dynamic'"),
    "phi_msft": (_set(model_type="phi-msft", architectures=["PhiForCausalLM"]), "older remote-code layout of Phi"),
    "layer_types_short": (_set(model_type="qwen2", architectures=["Qwen2ForCausalLM"], use_sliding_window=True,
                               layer_types=["full_attention"]), "layer_types must list"),
}
WEIGHT_FOLDERS = {
    "missing_tensor": (_pop("model.layers.1.self_attn.k_proj.weight"),
                       "missing tensors model.layers.1.self_attn.k_proj.weight"),
    "extra_tensor": (_add_qk_norm, "unexpected tensors model.layers.0.self_attn.q_norm.weight"),
    "unstackable": (_bad_k_shape, "do not stack"),
}


def make(root: str, name: str) -> tuple[str, str]:
    """(folder, expected fragment) of one hostile folder."""
    folder = os.path.join(root, name)
    if name in FOLDERS:
        edit, expect = FOLDERS[name]
        return llama_folder(folder, config_edit=edit), expect
    if name in WEIGHT_FOLDERS:
        edit, expect = WEIGHT_FOLDERS[name]
        return llama_folder(folder, state_edit=edit), expect
    if name == "shard_outside":
        return _shard_outside(folder), "outside the checkpoint folder"
    raise KeyError(name)


ALL = [*FOLDERS, *WEIGHT_FOLDERS, "shard_outside"]
