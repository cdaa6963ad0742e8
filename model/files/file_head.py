"""The first bytes of a file a user opened, or one clear line saying why they cannot be read."""

from __future__ import annotations

from transformer_viewer.model.files import regular_file
from transformer_viewer.model.files.file_errors import CHMOD, read_errors


def read_head(path: str, n: int) -> bytes:
    """Up to `n` bytes from the start of `path` (what decides its format); a path that is no
    regular file (a pipe, a device) is refused saying what it is, unread."""
    with read_errors(path, "put the checkpoint file itself there", "check the path", denied=CHMOD):
        return regular_file.read_head(path, n)


HEAD_BYTES = 64  # enough to tell every format we read, or name what a file is instead


def describe(head: bytes, size: int) -> str:
    """A few words on what a file seems to be, for the 'unknown format' message."""
    kinds = [
        (b"\x1f\x8b", "gzip-compressed data"), (b"\xfd7zXZ", "xz-compressed data"), (b"BZh", "bzip2-compressed data"),
        (b"\x89HDF", "an HDF5 file (Keras .h5?)"), (b"\x93NUMPY", "a NumPy .npy array"), (b"GGUF", "a GGUF file (llama.cpp)"),
        (b"PK", "a zip archive"), (b"\x7fELF", "a program (ELF executable)"),
    ]
    for magic, what in kinds:
        if head.startswith(magic):
            return f"{what}, {size} bytes"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    # NULs and other control bytes decode as UTF-8 too, but they make binary, not text.
    if text is None or any(not (c.isprintable() or c.isspace()) for c in text):
        return f"{size} bytes of binary data starting {head[:8].hex(' ')}"
    start = " ".join(text.split())[:30]
    if start.startswith(("{", "[")):
        return f"JSON text starting {start!r}"
    return f"text starting {start!r}"
