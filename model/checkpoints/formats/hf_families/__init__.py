"""Hugging Face decoder families other than GPT-2: config.json -> GPTConfig and their tensors
-> ours, one small module per group of related layouts.

`read(hf, folder, raw)` picks the family from `architectures` (else `model_type`), maps the
config (refusing anything we cannot compute exactly, before any tensor is touched), then
takes every tensor the family needs by name: a missing one or one left over is an error, so
weights never load into a computation they were not made for.
"""

from __future__ import annotations

import torch

from transformer_viewer.model.checkpoints.formats.hf_families import gemma, llama, mistral3, neox, qwen_vl
from transformer_viewer.model.checkpoints.formats.hf_families.common import Family, Fields, Tensors
from transformer_viewer.model.decoder.config import MAX_BLOCK_SIZE, GPTConfig
from transformer_viewer.model.errors import CheckpointError

FAMILIES: dict[str, Family] = {**llama.FAMILIES, **mistral3.FAMILIES, **gemma.FAMILIES, **neox.FAMILIES,
                               **qwen_vl.FAMILIES}
MODEL_TYPES: dict[str, str] = {**llama.MODEL_TYPES, **mistral3.MODEL_TYPES, **gemma.MODEL_TYPES, **neox.MODEL_TYPES,
                               **qwen_vl.MODEL_TYPES}
_MULTIMODAL = "ForConditionalGeneration"  # run as their text decoder
SUPPORTED = ", ".join(["GPT2", *(a.removesuffix("ForCausalLM") for a in FAMILIES if a.endswith("ForCausalLM"))]) \
    + " (...ForCausalLM); " + ", ".join(a.removesuffix(_MULTIMODAL) for a in FAMILIES if a.endswith(_MULTIMODAL)) \
    + f" (...{_MULTIMODAL})"
# Architectures people try that we know we cannot compute, and why.
MOE, HYBRID = "mixture-of-experts layers", "state-space (Mamba) layers beside or instead of attention"
KNOWN_REFUSALS = {
    "mixtral": MOE, "qwen2_moe": MOE, "qwen3_moe": MOE, "olmoe": MOE, "phimoe": MOE, "llama4": MOE, "llama4_text": MOE,
    "gpt_oss": MOE, "deepseek_v3": MOE, "qwen3_vl_moe": MOE,
    "qwen3_next": "linear-attention (Gated DeltaNet) layers", "qwen3_5": "linear-attention (Gated DeltaNet) layers",
    "qwen3_5_text": "linear-attention (Gated DeltaNet) layers",
    "mamba": HYBRID, "mamba2": HYBRID, "jamba": HYBRID, "falcon_h1": HYBRID,
    "gemma3n": "Gemma 3n's per-layer embeddings and AltUp", "gemma3n_text": "Gemma 3n's per-layer embeddings and AltUp",
    "gemma4": "Gemma 4's per-layer inputs and shared keys and values",
    "gemma4_text": "Gemma 4's per-layer inputs and shared keys and values",
    "bloom": "ALiBi attention biases", "mpt": "ALiBi attention biases",
}


def family_of(hf: dict, folder: str) -> tuple[str, Family] | None:
    """(architecture, Family) for config.json; None for GPT-2 (read by huggingface.py)."""
    archs = hf.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    model_type = hf.get("model_type")
    if arch == "GPT2LMHeadModel" or (arch is None and model_type == "gpt2") or arch == "GPT2Model":
        return None
    if arch is None and isinstance(model_type, str):
        arch = MODEL_TYPES.get(model_type)
    if arch in FAMILIES:
        return arch, FAMILIES[arch]
    said = f"architecture {arch!r} (model_type {model_type!r})" if arch else f"model_type {model_type!r}"
    why = KNOWN_REFUSALS.get(model_type) if isinstance(model_type, str) else None
    reason = f" ({why})" if why else ""
    raise CheckpointError(f"{folder}: config.json says {said}{reason}, which transformer-viewer cannot "
                          f"run; supported: {SUPPORTED}")


def refuse_quantized(hf: dict, folder: str) -> None:
    """Quantized weights (GPTQ, AWQ, bitsandbytes, FP8 with its scales) are integers or 8-bit
    floats plus scales that only their own kernels turn back into the model: refused with one
    line, before any tensor is read, naming the method."""
    text = hf.get("text_config")
    for config in (hf, text if isinstance(text, dict) else {}):
        quant = config.get("quantization_config")
        if quant is not None:
            method = quant.get("quant_method") if isinstance(quant, dict) else None
            said = f" ({method})" if isinstance(method, str) and method.isprintable() and len(method) <= 40 else ""
            raise CheckpointError(f"{folder}: config.json says the weights are quantized{said}, which "
                                  "transformer-viewer cannot run; open the model's bfloat16, float16 or float32 "
                                  "release")


def config_for(hf: dict, folder: str, arch: str, family: Family) -> GPTConfig:
    fields = family.config(Fields(hf, folder, arch))
    if fields.get("rope_scaling") == "dynamic":  # its point: prompts up to factor times the original context
        longer = min(int(fields["rope_original_context"] * fields["rope_factor"]), MAX_BLOCK_SIZE)
        fields["block_size"] = max(fields["block_size"], longer)
    try:
        return GPTConfig(**fields)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{folder}: bad config.json: {e}") from None


def state_for(raw: dict, config: GPTConfig, folder: str, family: Family) -> tuple[dict[str, torch.Tensor], dict]:
    """Our state dict from the file's (emptied as it goes), and ours -> the file's names."""
    prefix = next((p for p in family.prefixes if any(k.startswith(p) for k in raw)), "")
    t = Tensors(raw, prefix)
    family.weights(t, config)
    t.prefix = ""
    heads = [h for h in family.heads if h in raw]
    if heads:  # kept even for a tied config: read_folder ties it only if it equals the embedding
        t.put("lm_head.weight", heads[0])
        for h in heads[1:]:
            raw.pop(h)
    elif not config.tie_embeddings:
        raise CheckpointError(f"{folder}: config.json says tie_word_embeddings=false but the weights have no "
                              f"{family.heads[0]}; the head is missing")
    if config.extra.get("head_bias"):
        t.put("lm_head.bias", "lm_head.bias")
    if t.missing:
        raise CheckpointError(f"{folder}: missing tensors {_few(t.missing)}; the weights are not a complete "
                              f"{family.name} model of this config.json")
    if raw:
        raise CheckpointError(f"{folder}: unexpected tensors {_few(sorted(raw))}; the weights are not a "
                              f"{family.name} model of this config.json")
    return t.out, t.names


def _few(keys: list[str], n: int = 4) -> str:
    shown = ", ".join(keys[:n])
    return shown + (f" (and {len(keys) - n} more)" if len(keys) > n else "")
