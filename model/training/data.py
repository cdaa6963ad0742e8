"""Training text: plain or .xz files, tokenized with GPT-2, split into train and validation."""

from __future__ import annotations

import hashlib
import lzma
import os
from dataclasses import dataclass

import numpy as np

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files import regular_file
from transformer_viewer.model.files.text_file import decode_text
from transformer_viewer.model.tokenizers.tokenizer import ENDOFTEXT_ID, Tokenizer

XZ_MAGIC = b"\xfd7zXZ\x00"
# Text a compressed data file may expand to. A .xz of a few hundred KiB can hold a GiB of text;
# tokenizing holds about ten bytes per byte of text, so past this a file is a bomb, not a corpus.
MAX_DECOMPRESSED_BYTES = 64 << 20
XZ_DICTIONARY_LIMIT = 256 << 20  # memory the decoder may take for its dictionary (xz -9 needs 65 MiB)
DECOMPRESS_CHUNK = 1 << 20  # output asked of the decoder per call
# Other compressed formats this reader does not open: named, instead of being called binary.
OTHER_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"PK\x03\x04", "zip"))


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
        raw = decompress_xz(raw, path)
    else:
        for magic, name in OTHER_COMPRESSED:
            if raw.startswith(magic):
                raise ModelError(f"{path}: {name}-compressed data, which training does not read; decompress it, "
                                 "or recompress it with xz")
    return decode_text(raw, path, "training data"), digest


def decompress_xz(raw: bytes, path: str, cap: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The text an .xz file holds (every stream of a concatenated file, as `xz -d` reads it),
    decoded a chunk at a time so that output past `cap` bytes is refused before it is held."""
    out = bytearray()
    pending = raw
    while True:
        if not pending.startswith(XZ_MAGIC):
            found = "bytes after the end of its .xz data that are not xz data" if out else "no xz header"
            raise ModelError(f"{path}: not a valid .xz file ({found}); compress the text again with xz")
        decoder = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=XZ_DICTIONARY_LIMIT)
        try:
            while not decoder.eof:
                chunk = decoder.decompress(pending, max_length=min(DECOMPRESS_CHUNK, cap + 1 - len(out)))
                pending = b""
                out += chunk
                if len(out) > cap:
                    raise ModelError(f"{path}: the .xz file holds more than {cap >> 20} MiB of text, more than "
                                     "training data may be; split the text into smaller files")
                if decoder.needs_input and not chunk:
                    raise ModelError(f"{path}: the .xz file ends early (truncated after {len(out):,} bytes of "
                                     "text); compress the text again")
        except lzma.LZMAError as e:
            if "memory usage limit" in str(e).lower():
                raise ModelError(f"{path}: the .xz file asks for a dictionary over {XZ_DICTIONARY_LIMIT >> 20} MiB "
                                 "to decompress; recompress it with plain `xz`") from None
            raise ModelError(f"{path}: not a valid .xz file ({e}); compress the text again with xz") from None
        # Concatenated files: another stream may follow, after padding of zero bytes.
        pending = decoder.unused_data.lstrip(b"\x00")
        if not pending:
            return bytes(out)


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
