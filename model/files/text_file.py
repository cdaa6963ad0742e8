"""Text files the user hands us (training data, passages to score heads on): read only from a
regular file, bounded, and UTF-8 text, told apart from binary files, which would otherwise
tokenize silently into replacement characters."""

from __future__ import annotations

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files import regular_file

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


def read_text_file(path: str, max_bytes: int, purpose: str, fix: str, what: str = "text file") -> bytes:
    """The bytes of the text file `path`, read from a descriptor checked to be a regular file
    (a pipe or a device would block or never end) and refused unread when larger than
    `max_bytes` (`purpose` says what needs the text: "head scores need")."""
    if not regular_file.exists(path):
        raise ModelError(f"{path}: {what} not found")
    try:
        with regular_file.open_regular(path) as f:
            size = regular_file.size_of(f)
            if size > max_bytes:
                raise ModelError(f"{path}: {size:,} bytes is more text than {purpose}; {fix}")
            raw = f.read(max_bytes + 1)
    except regular_file.NotRegularFile as e:
        raise ModelError(f"{path}: {e.strerror}; give the {what} as a regular file") from None
    except OSError as e:
        raise ModelError(f"{path}: cannot read the {what} ({e.strerror or e}); check the path") from None
    if len(raw) > max_bytes:  # it grew while it was read
        raise ModelError(f"{path}: more than {max_bytes:,} bytes is more text than {purpose}; {fix}")
    return raw
