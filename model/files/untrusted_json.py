"""The one place untrusted JSON is parsed: config.json, our own config and training metadata,
safetensors headers, shard indexes, and the cache's small text files (`refs/main`).

Python's `json` trusts its input in ways a hostile file can exploit: it recurses once per
nesting level (about 1,000 deep is a RecursionError), converts integers of any length (over
4,300 digits is a ValueError, and long before that a slow one), turns `1e400` into infinity,
and accepts `NaN`/`Infinity`. Here the size is checked before anything is read, the nesting
depth and the length of every number before anything is parsed (on the text with its strings
removed, so a bracket or digit inside a string counts for nothing), and each float as it is
parsed; each failure is one
CheckpointError line naming the file and what to do.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import regular_file
from transformer_viewer.model.files.file_errors import read_errors

MAX_JSON_BYTES = 16 << 20  # GPT-2 XL's safetensors header is 60 KB; a config.json a few KB
MAX_TEXT_BYTES = 4096  # refs/main holds one 40-character revision hash
MAX_DEPTH = 64  # real files nest 2-5 levels
MAX_INT_DIGITS = 100  # digits in one number; a 64-bit offset has 20, Python refuses ints past 4,300
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # one JSON string, escapes included
_LONG_DIGITS = re.compile(r"\d{" + str(MAX_INT_DIGITS + 1) + ",}")
_CHUNK = 1 << 20


class _Refused(ValueError):
    """A number or constant the hooks refuse; its text is the reason shown to the user."""


def parse(data: str | bytes, where: str, fix: str, allow_non_finite: bool = False) -> object:
    """The value `data` holds, or CheckpointError(f"{where}: {reason}; {fix}").

    `allow_non_finite` keeps NaN/Infinity (free-form training records may hold a NaN loss);
    configs refuse them, as they do numbers too large for a float."""
    if isinstance(data, bytes):
        if len(data) > MAX_JSON_BYTES:
            raise _too_large(where, len(data), MAX_JSON_BYTES, fix)
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError(f"{where}: not valid JSON (not UTF-8 text); {fix}") from None
    if len(data) > MAX_JSON_BYTES:
        raise _too_large(where, len(data), MAX_JSON_BYTES, fix)
    skeleton = _STRING.sub("", data)  # what remains outside strings: brackets, numbers, literals
    depth = nesting_depth(skeleton)
    if depth > MAX_DEPTH:
        raise CheckpointError(f"{where}: JSON nested {depth} levels deep, more than the {MAX_DEPTH} a real file has; "
                              f"{fix}")
    digits = max((len(m.group()) for m in _LONG_DIGITS.finditer(skeleton)), default=0)
    if digits:
        raise CheckpointError(f"{where}: a JSON number of {digits} digits, more than any real value has "
                              f"({MAX_INT_DIGITS}); {fix}")
    try:
        return json.loads(data, parse_float=_float, parse_constant=float if allow_non_finite else _constant)
    except _Refused as e:
        raise CheckpointError(f"{where}: {e}; {fix}") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise CheckpointError(f"{where}: not valid JSON ({_first_line(e)}); {fix}") from None


def read_file(path: str, fix: str, where: str | None = None, max_bytes: int = MAX_JSON_BYTES) -> object:
    """Parse the JSON file at `path` after checking its size (OSError is the caller's)."""
    return parse(read_bytes(path, max_bytes, fix), where or path, fix)


def read_object(path: str, fix: str, max_bytes: int = MAX_JSON_BYTES) -> dict:
    """A JSON object from a file (config.json, tokenizer_config.json, ...), with the bounds above; a
    file that cannot be read or holds anything but an object is one line ending in `fix`."""
    with read_errors(path, fix, fix):
        obj = read_file(path, fix, max_bytes=max_bytes)
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: not a JSON object; {fix}")
    return obj


def read_bytes(path: str, max_bytes: int, fix: str) -> bytes:
    """The whole file, refused unread when it is larger than `max_bytes` (or is no regular file:
    `regular_file.NotRegularFile`, an OSError)."""
    with regular_file.open_regular(path) as f:
        size = regular_file.size_of(f)
        if size > max_bytes:
            raise _too_large(path, size, max_bytes, fix)
        data = f.read(max_bytes + 1)  # a file still growing is cut off, never read whole
    if len(data) > max_bytes:
        raise _too_large(path, len(data), max_bytes, fix)
    return data


def read_small_text(path: str, max_bytes: int = MAX_TEXT_BYTES) -> str | None:
    """A short text file such as `refs/main`, stripped; None when missing, unreadable, binary,
    larger than `max_bytes` or no regular file at all (a pipe, a device: such a file is not what
    its name says, so it is ignored, never waited on)."""
    try:
        data = regular_file.read_at_most(path, max_bytes)
    except (OSError, ValueError):
        return None
    if len(data) > max_bytes:
        return None
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None


def nesting_depth(skeleton: str) -> int:
    """The deepest bracket nesting of JSON text whose strings are removed, counted without recursion."""
    codes = np.frombuffer(skeleton.encode("ascii", "ignore"), dtype=np.uint8)
    depth = peak = 0
    for start in range(0, len(codes), _CHUNK):  # chunks keep the running sum's memory small
        c = codes[start:start + _CHUNK]
        step = ((c == 0x5B) | (c == 0x7B)).astype(np.int32) - ((c == 0x5D) | (c == 0x7D)).astype(np.int32)
        if not step.any():
            continue
        running = depth + np.cumsum(step, dtype=np.int64)
        peak = max(peak, int(running.max()))
        depth = int(running[-1])
    return peak


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {_short(text)} is out of range for a float")
    return value


def _constant(text: str) -> float:
    raise _Refused(f"{text} where a finite number is expected")


def _too_large(where: str, size: int, limit: int, fix: str) -> CheckpointError:
    return CheckpointError(f"{where}: {size:,} bytes, more than the {_human(limit)} such a file can be; {fix}")


def _human(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def _short(text: str, n: int = 24) -> str:
    return text if len(text) <= n else text[:n] + "…"


def _first_line(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nested too deeply"
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:200]
