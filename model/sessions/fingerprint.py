"""A checkpoint's fingerprint, taken once when it is loaded, so a reopened session can tell
whether it still has the same weights.

- A model in the Hugging Face cache: its weight files are links into the cache's `blobs/`,
  whose names are the files' sha256 (git's sha1 for small files): those names are the
  fingerprint, and nothing is read (`hf-cache-blob-names`).
- Any other file or folder: each weight file's size and the sha256 of its first, middle and
  last MiB (`size-and-sampled-sha256`). Reading whole multi-GB files at every load would cost
  seconds; the modification time is left out, as copying a checkpoint to another machine
  changes it and nothing else.

The tokenizer's fingerprint is the sha256 of its tokenizer.json and tokenizer_config.json
(`builtin:gpt2` for GPT-2's, which ships with the app).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from transformer_viewer.model.files import regular_file

SAMPLE = 1 << 20  # bytes hashed at each of three places in a file
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".json")  # config.json is part of a model
MAX_FILES = 4096
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
HF_CACHE = "hf-cache-blob-names"
SAMPLED = "size-and-sampled-sha256"


@dataclass(frozen=True)
class Fingerprint:
    method: str  # HF_CACHE or SAMPLED
    digest: str  # sha256 hex over what the method reads
    files: int = 0  # how many files it covers


def checkpoint_fingerprint(source: str) -> Fingerprint:
    """The fingerprint of the checkpoint file, folder or cached model name `source`."""
    from transformer_viewer.model.checkpoints.formats import (
        hf_cache,  # brings torch: only where a model loads
    )

    if not os.path.exists(source) and hf_cache.looks_like_name(source):
        snapshot = hf_cache.find_snapshot(source)
        if snapshot is not None:
            return _cache_fingerprint(snapshot)
    files = _weight_files(source) if os.path.isdir(source) else [source]
    h = hashlib.sha256()
    for path in files:
        h.update(os.path.basename(path).encode("utf-8", "surrogateescape") + b"\0")
        h.update(_sampled(path))
    return Fingerprint(SAMPLED, h.hexdigest(), len(files))


def _weight_files(folder: str) -> list[str]:
    names = sorted(n for n in os.listdir(folder) if n.endswith(WEIGHT_SUFFIXES) and not n.startswith("."))
    return [os.path.join(folder, n) for n in names[:MAX_FILES] if os.path.isfile(os.path.join(folder, n))]


def _cache_fingerprint(snapshot: str) -> Fingerprint:
    h = hashlib.sha256()
    files = _weight_files(snapshot)
    for path in files:
        blob = os.path.basename(os.path.realpath(path))  # the cache names each blob by its hash
        h.update(f"{os.path.basename(path)}={blob}\n".encode("utf-8", "surrogateescape"))
    return Fingerprint(HF_CACHE, h.hexdigest(), len(files))


def _sampled(path: str) -> bytes:
    """sha256 of the file's size and of its first, middle and last SAMPLE bytes."""
    h = hashlib.sha256()
    with regular_file.open_regular(path, buffering=0) as f:
        size = regular_file.size_of(f)
        h.update(size.to_bytes(8, "little"))
        for start in sorted({0, max(0, size // 2 - SAMPLE // 2), max(0, size - SAMPLE)}):
            f.seek(start)
            h.update(f.read(SAMPLE))
    return h.digest()


def tokenizer_fingerprint(spec: str) -> str:
    """sha256 over the tokenizer's files ("builtin:gpt2" for GPT-2's own)."""
    if spec == "gpt2":
        return "builtin:gpt2"
    h = hashlib.sha256()
    for name in TOKENIZER_FILES:
        path = os.path.join(spec, name)
        if os.path.isfile(path):
            h.update(name.encode() + b"\0")
            h.update(_whole(path))
    return h.hexdigest()


def _whole(path: str) -> bytes:
    h = hashlib.sha256()
    with regular_file.open_regular(path, buffering=0) as f:
        while chunk := f.read(SAMPLE):
            h.update(chunk)
    return h.digest()
