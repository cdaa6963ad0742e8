"""Which format a path holds, decided from its contents (never trusting the extension alone).

- a folder: Hugging Face (`config.json` + weights), or one holding nanoGPT's `ckpt.pt`;
- a safetensors file (8-byte header length, then a JSON header): ours when its metadata has
  our tag; else the weights of a Hugging Face folder (config.json beside it) or a tutorial state;
- a zip (torch >= 1.6) or pickle (legacy torch) file: loaded with weights_only=True, then
  classified by what it holds (nanoGPT's `model_args` + `model`, a tutorial or HF state dict);
- a name that is no path (`gpt2`): the local Hugging Face cache, offline.

A reader is `reader(source, n_head=None) -> (config, state in our names, info)`. Readers of
pickles close over the object already loaded, so each file is unpickled once.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from transformer_viewer.model.checkpoints.formats import (
    hf_cache,
    huggingface,
    nanogpt,
    native,
    pickle_safe,
    safetensors_file,
    schema,
    tutorial,
)
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import folder_files, regular_file
from transformer_viewer.model.files.file_head import HEAD_BYTES, describe, read_head

Reader = Callable[..., tuple]


def find_reader(source: str) -> tuple[str, Reader]:
    if os.path.isdir(source):
        return _folder(source)
    if not os.path.exists(source):
        if os.path.islink(source):
            raise _broken_link(source)
        if hf_cache.looks_like_name(source):
            snapshot = hf_cache.find_snapshot(source)
            if snapshot is None:
                raise hf_cache.not_downloaded(source)
            return "huggingface", lambda _src, n_head=None: hf_cache.read_cached(source, snapshot, n_head)
        raise CheckpointError(f"{source}: file not found; {_check_the_name(source)}")
    if not os.path.isfile(source):
        try:
            kind = regular_file.kind_of(os.stat(source).st_mode)
        except OSError:
            kind = "a special file"
        raise CheckpointError(f"{source}: {kind}, not a regular file or folder; give a checkpoint file or a model "
                              "folder")
    return _file(source)


def _check_the_name(source: str) -> str:
    """What to do about a path that names nothing. A name with U+FFFD in it is most likely one
    whose bytes are not UTF-8, decoded with replacement on the way here (Qt's file dialogs do
    that), so the real file has another name."""
    if "\ufffd" in source:
        return ("its name holds a character that stands for bytes that are not UTF-8 (a file dialog shows such "
                "names but cannot open them); rename the file or folder to UTF-8, or give its path on the command "
                "line")
    return "check the path"


def _broken_link(path: str) -> CheckpointError:
    """A symbolic link that leads nowhere: a loop, or a target that is gone."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return CheckpointError(f"{path}: a symbolic link loop (following it never reaches a file); point it at a "
                                   "checkpoint file")
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return CheckpointError(f"{path}: a symbolic link to {target}, which does not exist; point it at a checkpoint file")


def _file(path: str) -> tuple[str, Reader]:
    head = read_head(path, HEAD_BYTES)
    if not head:
        raise CheckpointError(f"{path}: the file is empty (0 bytes); it was not saved completely, re-save it")
    header = safetensors_file.header_if_safetensors(path, head)
    if header is not None:
        return _safetensors(path, header)
    if pickle_safe.looks_like_pickle(head):
        obj = pickle_safe.load(path)
        return _classify_pickle(path, obj)
    raise CheckpointError(f"{path}: unknown checkpoint format: found {describe(head, regular_file.size_of_path(path))}; "
                          "give a .safetensors, nanoGPT ckpt.pt, state-dict .pt or Hugging Face folder")


def _safetensors(path: str, header: safetensors_file.Header) -> tuple[str, Reader]:
    if header.metadata.get("format") == native.FORMAT_TAG:
        return "native", lambda src, n_head=None: native.read_native(src)
    folder = os.path.dirname(os.path.abspath(path))
    keys = list(header.entries)
    if huggingface.is_hf_folder(folder) and os.path.basename(path).startswith("model"):
        # A shard means the folder's index; a single file is read as given.
        weights = None if "-of-" in os.path.basename(path) else path
        return "huggingface", lambda _src, n_head=None: huggingface.read_folder(folder, weights=weights)
    if "tok_emb.weight" in keys:
        state = huggingface.load_safetensors(path)
        if tutorial.is_tutorial(state):
            return "tutorial", lambda src, n_head=None: tutorial.read_tutorial(src, state, n_head)
    raise CheckpointError(f"{path}: unknown checkpoint format: a safetensors file without transformer-viewer "
                          f"metadata whose keys ({_few(keys)}) match no known layout; a Hugging Face model needs "
                          "its config.json beside it")


def _classify_pickle(path: str, obj: object) -> tuple[str, Reader]:
    schema.check_state_names(path, obj)
    if nanogpt.is_nanogpt(obj):
        return "nanogpt", lambda src, n_head=None: nanogpt.read_nanogpt(src, obj)
    if tutorial.is_tutorial(obj):
        return "tutorial", lambda src, n_head=None: tutorial.read_tutorial(src, obj, n_head)
    folder = os.path.dirname(os.path.abspath(path))
    if isinstance(obj, dict) and huggingface.is_hf_folder(folder) and _looks_gpt2(obj):
        state = obj.get("state_dict") if isinstance(obj.get("state_dict"), dict) else obj
        return "huggingface", lambda _src, n_head=None: huggingface.read_folder(folder, weights=path, raw=state)
    if isinstance(obj, dict) and _looks_gpt2(obj):
        raise CheckpointError(f"{path}: GPT-2-layout weights without their config: put the model's config.json "
                              "beside the file (a Hugging Face folder) or save it as a nanoGPT ckpt.pt with model_args")
    raise CheckpointError(f"{path}: unknown checkpoint format: found a torch file holding {describe_object(obj)}, "
                          "which matches no known layout (nanoGPT, tutorial GPTStyleModel, Hugging Face GPT-2)")


def _looks_gpt2(state: dict) -> bool:
    return any(str(k).endswith("wte.weight") for k in state)


def _folder(folder: str) -> tuple[str, Reader]:
    if huggingface.is_hf_folder(folder):
        return "huggingface", lambda _src, n_head=None: huggingface.read_folder(folder)
    ckpt = os.path.join(folder, "ckpt.pt")
    if regular_file.exists(ckpt):  # anything by that name: a pipe or a broken link is read, and refused as what it is  # nanoGPT's out_dir
        folder_files.check_inside(folder, ckpt)  # a folder's files lie inside it, as a Hugging Face folder's
        fmt, reader = _file(ckpt)
        return fmt, lambda _src, n_head=None: reader(ckpt, n_head=n_head)
    try:
        entries = sorted(os.listdir(folder))
    except PermissionError:
        raise CheckpointError(f"{folder}: permission denied listing the folder; make it readable") from None
    found = f"it holds {_few(entries, 5)}" if entries else "it is empty"
    raise CheckpointError(f"{folder}: a folder with no model in it ({found}); give a checkpoint file, or a "
                          "Hugging Face folder with config.json and model.safetensors")


def describe_object(obj: object) -> str:
    if isinstance(obj, dict):
        keys = [str(k) for k in obj]
        return f"a dict with keys {_few(keys)}" if keys else "an empty dict"
    return f"a {type(obj).__name__}"


def _few(items: list[str], n: int = 4) -> str:
    shown = ", ".join(items[:n])
    return shown + (f" (and {len(items) - n} more)" if len(items) > n else "")
