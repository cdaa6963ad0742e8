"""A SentencePiece `precompiled_charsmap` (the `Precompiled` normalizer of T5-, ALBERT- and
XLM-R-style tokenizer.json files), checked in Python before the tokenizers library sees it.

The format: a little-endian u32 giving the trie's size in bytes, the trie (a Darts double array
of u32 units), then the replacement strings, each ended by a NUL. The library reads it without
bounds checks: a short or non-UTF-8 blob panics at load, and a unit pointing past the trie's end,
or a leaf pointing past the strings or into the middle of a character, panics when a prompt's
bytes walk there. `check_charsmap` walks every path a UTF-8 text can take through the trie,
level by level (vectorised over each level's nodes), and refuses what would panic; it returns
the longest replacement, in characters, which is how much the map can grow one character.
"""

from __future__ import annotations

import numpy as np

MAX_CHARSMAP_BYTES = 8 << 20  # SentencePiece's nmt_nfkc map is about 240 kB
MAX_KEY_BYTES = 64  # bytes of the longest key a text can follow; real maps' keys are a few characters
_VALUE_MASK = (1 << 31) - 1
_LABEL_MASK = (1 << 31) | 0xFF


class CharsmapError(ValueError):
    """Why a charsmap is refused, in a few words."""


def _offset(units: np.ndarray) -> np.ndarray:
    """A unit's offset: bits 10.. of the unit, shifted by 8 more when bit 9 is set."""
    return (units >> 10) << ((units & (1 << 9)) >> 6)


def _next_bytes(state: int) -> np.ndarray:
    """The bytes a UTF-8 text may have next, `state` continuation bytes into a character."""
    if state:
        return np.arange(0x80, 0xC0, dtype=np.int64)
    return np.concatenate([np.arange(0x01, 0x80), np.arange(0xC2, 0xF5)]).astype(np.int64)  # NUL ends the walk


def _state_after(state: int, c: np.ndarray) -> np.ndarray:
    """Continuation bytes still due after byte `c`."""
    if state:
        return np.full(c.shape, state - 1, dtype=np.int64)
    return np.select([c < 0x80, c < 0xE0, c < 0xF0], [0, 1, 2], 3).astype(np.int64)


def check_charsmap(data: bytes) -> int:
    """The longest replacement a valid charsmap makes (characters, at least 1); CharsmapError when
    the library would panic on it, at load or on some text."""
    if len(data) > MAX_CHARSMAP_BYTES:
        raise CharsmapError(f"is {len(data):,} bytes (at most {MAX_CHARSMAP_BYTES:,})")
    if len(data) < 4:
        raise CharsmapError(f"is {len(data)} bytes, shorter than its own 4-byte header")
    n = int.from_bytes(data[:4], "little") // 4
    if 4 + 4 * n > len(data):
        raise CharsmapError(f"claims a trie of {n:,} units but holds {(len(data) - 4) // 4:,}")
    if n == 0:
        raise CharsmapError("has an empty trie")
    units = np.frombuffer(data, dtype="<u4", count=n, offset=4).astype(np.int64)
    strings = data[4 + 4 * n:]
    try:
        strings.decode("utf-8")
    except UnicodeDecodeError:
        raise CharsmapError("has replacement strings that are not UTF-8") from None
    visited = np.zeros((n, 4), dtype=bool)  # (unit, continuation bytes due) already walked
    longest = 1
    # The frontier: each node's base (its children sit at base ^ byte), by UTF-8 state.
    frontier = {0: np.array([int(_offset(units[:1])[0])], dtype=np.int64)}
    for _depth in range(MAX_KEY_BYTES + 1):
        if not any(len(b) for b in frontier.values()):
            return longest
        nxt: dict[int, list[np.ndarray]] = {s: [] for s in range(4)}
        for state, bases in frontier.items():
            if not len(bases):
                continue
            c = _next_bytes(state)
            child = (bases[:, None] ^ c[None, :]).ravel()  # (nodes * bytes,)
            cc = np.broadcast_to(c, (len(bases), len(c))).ravel()
            if child.max() >= n:
                raise CharsmapError("has a trie unit pointing past the trie's end")
            unit = units[child]
            hit = (unit & _LABEL_MASK) == cc
            child, cc, unit = child[hit], cc[hit], unit[hit]
            after = _state_after(state, cc)
            fresh = ~visited[child, after]
            child, unit, after = child[fresh], unit[fresh], after[fresh]
            visited[child, after] = True
            base = child ^ _offset(unit)
            leaf = ((unit >> 8) & 1) == 1
            if leaf.any():
                if base[leaf].max() >= n:
                    raise CharsmapError("has a leaf pointing past the trie's end")
                if (after[leaf] != 0).any():
                    raise CharsmapError("has a key ending inside a character")
                longest = max(longest, _longest_value(units[base[leaf]] & _VALUE_MASK, strings))
            for s in range(4):
                nxt[s].append(base[after == s])
        frontier = {s: np.unique(np.concatenate(v)) for s, v in nxt.items() if v}
    raise CharsmapError(f"has keys longer than {MAX_KEY_BYTES} bytes")


def _longest_value(values: np.ndarray, strings: bytes) -> int:
    """The longest replacement (characters) the leaf values point at; CharsmapError for a value
    past the strings or inside a character."""
    longest = 0
    for v in np.unique(values).tolist():
        if v > len(strings):
            raise CharsmapError("has a leaf pointing past its replacement strings")
        if v < len(strings) and 0x80 <= strings[v] < 0xC0:
            raise CharsmapError("has a leaf pointing inside a character of its replacement strings")
        end = strings.find(b"\0", v)
        longest = max(longest, len(strings[v:end if end >= 0 else len(strings)].decode("utf-8")))
    return longest
