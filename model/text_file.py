"""Text files the user hands us (training data, passages to score heads on): UTF-8 text, told
apart from binary files, which would otherwise tokenize silently into replacement characters."""

from __future__ import annotations

from transformer_viewer.model.errors import ModelError

# Undecodable bytes a text file may hold before it is called not UTF-8: a stray Latin-1 byte
# in a long text is fine (it becomes U+FFFD); a file where one byte in a hundred is, is not text.
MAX_UNDECODABLE_SHARE = 0.01


def decode_text(raw: bytes, path: str, what: str = "text file") -> str:
    """`raw` as text, or a one-line ModelError saying the file is not text and what to give."""
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise ModelError(f"{path}: not a text file (a NUL byte at offset {nul}: binary data); "
                         f"give the {what} as plain UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    text = raw.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    if bad > MAX_UNDECODABLE_SHARE * max(1, len(text)):
        raise ModelError(f"{path}: not UTF-8 text ({bad} of {len(raw)} bytes cannot be decoded); "
                         f"give the {what} as plain UTF-8 text (convert it with iconv -t UTF-8)")
    return text
