"""Our own checkpoint format: one .safetensors file whose metadata holds the config as JSON,
the tokenizer name and free-form training information."""

from __future__ import annotations

import json
import os
import tempfile

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from transformer_viewer.model.config import GPTConfig
from transformer_viewer.model.errors import CheckpointError

FORMAT_TAG = "transformer-viewer"


def is_native(path: str) -> bool:
    """A safetensors file whose metadata carries our format tag."""
    meta = read_metadata(path)
    return meta is not None and meta.get("format") == FORMAT_TAG


def read_metadata(path: str) -> dict | None:
    try:
        with safe_open(path, framework="pt") as f:
            return f.metadata() or {}
    except (SafetensorError, OSError, ValueError, RuntimeError):
        return None


def read_native(path: str) -> tuple[GPTConfig, dict[str, torch.Tensor], dict]:
    """(config, state dict, info) of a native file; info has `tokenizer` and `training`."""
    meta = read_metadata(path)
    if meta is None:
        raise CheckpointError(f"{path}: not a readable safetensors file (truncated or corrupt); re-save or re-download it")
    try:
        config_dict = json.loads(meta["config"])
    except (KeyError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: its metadata has no valid 'config' JSON ({e}); re-save it with save_checkpoint") from None
    if not isinstance(config_dict, dict):
        raise CheckpointError(f"{path}: its 'config' metadata is not a JSON object; re-save it with save_checkpoint")
    try:
        config = GPTConfig.from_dict(config_dict)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad config: {e}") from None
    try:
        with safe_open(path, framework="pt") as f:
            state = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path}: tensor data is truncated or corrupt ({_first_line(e)}); re-save or re-download it") from None
    info = {"tokenizer": meta.get("tokenizer", "gpt2")}
    try:
        info["training"] = json.loads(meta.get("training", "{}"))
    except json.JSONDecodeError:
        info["training"] = {}
    return config, state, info


def write_native(path: str, config: GPTConfig, state: dict[str, torch.Tensor], tokenizer: str = "gpt2",
                 training: dict | None = None) -> None:
    """Write atomically: a temporary file in the same folder, then one rename, so a crash or a
    full disk never leaves a half-written checkpoint under the real name."""
    meta = {
        "format": FORMAT_TAG,
        "config": config.to_json(),
        "tokenizer": tokenizer,
        "training": json.dumps(training or {}, sort_keys=True),
    }
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=folder)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=meta)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a checkpoint is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
