"""SentencePiece `precompiled_charsmap` blobs built by hand for the tests: a Darts double array
mapping single bytes to replacement strings, laid out as the format wants (root at unit 0, its
children at 256 ^ byte, each child's value unit at 768 + byte), and broken on purpose where asked."""

from __future__ import annotations

import base64
import struct

ROOT_OFFSET = 256  # the root's children sit at 256 ^ byte
CHILD_OFFSET = 512  # a child at 256 + b keeps its value unit at (256 + b) ^ 512 = 768 + b
UNITS = 1024
LEAF_BIT = 1 << 8
VALUE_BIT = 1 << 31  # set on value units, so that no label ever matches them


def _unit_with_offset(offset: int) -> int:
    assert offset < 1 << 21
    return offset << 10


def charsmap(mapping: dict[int, str], units: int = UNITS, root_offset: int = ROOT_OFFSET,
             values: dict[int, int] | None = None, trie_size: int | None = None) -> bytes:
    """A charsmap replacing each byte key of `mapping` by its string. `values` overrides the
    string offset a key's leaf points at; `units`, `root_offset` and `trie_size` break the layout."""
    array = [0] * units
    array[0] = _unit_with_offset(root_offset)
    strings = b""
    for byte, replacement in mapping.items():
        child = ROOT_OFFSET ^ byte
        array[child] = _unit_with_offset(CHILD_OFFSET) | LEAF_BIT | byte
        value = len(strings) if values is None or byte not in values else values[byte]
        array[child ^ CHILD_OFFSET] = VALUE_BIT | value
        strings += replacement.encode("utf-8") + b"\0"
    size = 4 * len(array) if trie_size is None else trie_size
    return struct.pack("<I", size) + struct.pack(f"<{len(array)}I", *array) + strings


def as_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def precompiled(data: bytes) -> dict:
    """The normalizer spec holding `data`."""
    return {"type": "Precompiled", "precompiled_charsmap": as_base64(data)}
