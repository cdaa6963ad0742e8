"""nanoGPT's `ckpt.pt`: a dict with `model_args` (the GPTConfig fields) and `model` (the state).

The state may carry torch.compile's `_orig_mod.` prefix and, from models trained without flash
attention, the `attn.bias` causal-mask buffers; both are dropped. `bias=False` models have no
bias tensors at all, which our `bias` field covers. The vocabulary is often padded to 50304
for speed: the config keeps 50304 (the weights have that many rows) and the session ignores
logits past the tokenizer's 50257. nanoGPT's MLP uses exact (erf) GELU.
"""

from __future__ import annotations

import math

import torch

from transformer_viewer.model.checkpoints.formats import gpt2_layout, schema
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import CheckpointError

REQUIRED_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")


def is_nanogpt(obj: object) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("model_args"), dict) and isinstance(obj.get("model"), dict)


def read_nanogpt(path: str, obj: dict) -> tuple[GPTConfig, dict[str, torch.Tensor], dict]:
    args = obj["model_args"]
    missing = [k for k in REQUIRED_ARGS if k not in args]
    if missing:
        raise CheckpointError(f"{path}: its model_args lack {', '.join(missing)}; it is not a complete nanoGPT checkpoint")
    raw = obj["model"]
    try:
        schema.check_model_args(args)
    except ValueError as e:
        raise CheckpointError(f"{path}: bad model_args: {e}") from None
    state, names = gpt2_layout.to_ours(raw, conv1d=False)
    try:
        config = GPTConfig(
            block_size=args["block_size"], vocab_size=args["vocab_size"], n_layer=args["n_layer"],
            n_head=args["n_head"], n_embd=args["n_embd"], dropout=float(args.get("dropout", 0.0) or 0.0),
            bias=bool(args.get("bias", True)), activation="gelu", positional="learned",
            tie_embeddings=gpt2_layout.tied(state), layer_norm_eps=1e-5,
        )
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad model_args: {e}") from None
    info = {
        "tokenizer": "gpt2",
        "training": _training_info(obj),
        "key_name": gpt2_layout.file_namer(names, raw.keys()),
    }
    return config, state, info


def _training_info(obj: dict) -> dict:
    """What nanoGPT recorded about its run, reduced to JSON-safe values."""
    info = {"source_format": "nanogpt"}
    for key in ("iter_num", "best_val_loss"):
        if key in obj:
            v = _json_safe(obj[key])
            if v is not None:
                info[key] = v
    if isinstance(obj.get("config"), dict):
        info["config"] = {k: v for k, v in ((str(k), _json_safe(v)) for k, v in obj["config"].items()) if v is not None}
    return info


def _json_safe(v):
    if isinstance(v, torch.Tensor):
        v = v.item() if v.numel() == 1 else None
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    if isinstance(v, list | tuple) and all(isinstance(x, bool | int | float | str) for x in v):
        return list(v)
    return None
