"""Our own checkpoint format: one .safetensors file whose metadata holds the config as JSON,
the tokenizer name and free-form training information."""

from __future__ import annotations

import json

import torch
from safetensors.torch import save

from transformer_viewer.model.checkpoints.expected_state import check_size
from transformer_viewer.model.checkpoints.formats import safetensors_file, schema
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import untrusted_json
from transformer_viewer.model.files.atomic_write import write_bytes

FORMAT_TAG = "transformer-viewer"
FIX = "re-save it with save_checkpoint"


def is_native(path: str) -> bool:
    """A safetensors file whose metadata carries our format tag."""
    meta = read_metadata(path)
    return meta is not None and meta.get("format") == FORMAT_TAG


def read_metadata(path: str) -> dict | None:
    """The file's safetensors metadata, or None when it is no readable safetensors file."""
    try:
        return safetensors_file.read_metadata(path)
    except CheckpointError:
        return None


def read_native(path: str) -> tuple[GPTConfig, dict[str, torch.Tensor], dict]:
    """(config, state dict, info) of a native file; info has `tokenizer` and `training`."""
    meta = safetensors_file.read_metadata(path)
    if not isinstance(meta.get("config"), str):
        raise CheckpointError(f"{path}: its metadata has no valid 'config' JSON; re-save it with save_checkpoint")
    config_dict = untrusted_json.parse(meta["config"], f"{path}: its 'config' metadata", FIX)
    if not isinstance(config_dict, dict):
        raise CheckpointError(f"{path}: its 'config' metadata is not a JSON object; re-save it with save_checkpoint")
    try:
        schema.check_config_fields(config_dict)
        config = GPTConfig.from_dict(config_dict)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad config: {e}") from None

    check_size(config, path)  # before any weight is read
    info = {"tokenizer": meta.get("tokenizer", "gpt2"), "training": read_training(path, meta)}
    return config, safetensors_file.read_tensors(path), info


def read_training(path: str, meta: dict) -> dict:
    """The training record: free-form, but an object whose known fields have their types.
    NaN stays (a run saved before its first step has no loss yet)."""
    where = f"{path}: its 'training' metadata"
    return schema.check_training(where, untrusted_json.parse(meta.get("training", "{}"), where, FIX,
                                                             allow_non_finite=True))


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
    write_checkpoint_bytes(path, save(tensors, metadata=meta))


def write_checkpoint_bytes(path: str, data: bytes) -> None:
    """`data` to `path` whole or not at all; a full disk is one CheckpointError line."""
    try:
        write_bytes(path, data)
    except OSError as e:
        raise CheckpointError(f"cannot write {path}: {e.strerror or e}; free some disk space or choose another "
                              "folder (the previous file, if any, is unchanged)") from None
