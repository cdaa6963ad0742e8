"""Training text: plain or .xz files, tokenized with GPT-2, split into train and validation."""

from __future__ import annotations

import hashlib
import lzma
import os
from dataclasses import dataclass

import numpy as np

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.formats import regular_file
from transformer_viewer.model.text_file import decode_text
from transformer_viewer.model.tokenizer import ENDOFTEXT_ID, Tokenizer

XZ_MAGIC = b"\xfd7zXZ\x00"


@dataclass(frozen=True)
class Corpus:
    train: np.ndarray  # token ids, uint16
    val: np.ndarray
    files: tuple[dict, ...]  # {"path", "sha256", "tokens"} per file


def read_text(path: str) -> tuple[str, str]:
    """(text, sha256 of the file as stored) for a plain or .xz file (told apart by the xz magic
    bytes, so a compressed file without the extension is not read as text)."""
    if not regular_file.exists(path):
        raise ModelError(f"{path}: data file not found")
    try:
        with regular_file.open_regular(path) as f:  # never a pipe or a device: they could block or never end
            raw = f.read()
    except regular_file.NotRegularFile as e:
        raise ModelError(f"{path}: {e.strerror}; give the training text as a regular file") from None
    except OSError as e:
        raise ModelError(f"{path}: cannot read the data file ({e.strerror})") from None
    digest = hashlib.sha256(raw).hexdigest()
    if raw.startswith(XZ_MAGIC) or path.endswith(".xz"):
        try:
            raw = lzma.decompress(raw)
        except lzma.LZMAError as e:
            raise ModelError(f"{path}: not a valid .xz file ({e})") from None
    return decode_text(raw, path, "training data"), digest


def load_corpus(paths: list[str], val_fraction: float = 0.05, tokenizer: Tokenizer | None = None) -> Corpus:
    """The last `val_fraction` of every file is held out, so validation covers each source."""
    if not 0.0 < val_fraction < 1.0:
        raise ModelError(f"the validation fraction must be between 0 and 1, got {val_fraction}")
    if not paths:
        raise ModelError("no data files given")
    tok = tokenizer or Tokenizer()
    train_parts, val_parts, files = [], [], []
    for path in paths:
        text, digest = read_text(path)
        ids = np.asarray(tok.enc.encode_ordinary(text) + [ENDOFTEXT_ID], dtype=np.uint16)
        cut = int(len(ids) * (1.0 - val_fraction))
        train_parts.append(ids[:cut])
        val_parts.append(ids[cut:])
        files.append({"path": os.path.basename(path), "sha256": digest, "tokens": int(len(ids))})
    return Corpus(np.concatenate(train_parts), np.concatenate(val_parts), tuple(files))


def unigram_loss(train: np.ndarray, val: np.ndarray, vocab_size: int) -> float:
    """Cross-entropy (nats/token) on val of the unigram distribution of the training tokens,
    add-one smoothed so unseen validation tokens have finite cost: the baseline to beat."""
    counts = np.bincount(train.astype(np.int64), minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[val.astype(np.int64)].mean())
