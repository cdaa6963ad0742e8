"""A safetensors file read without mapping it: the bounded header, then each tensor's bytes read
into the tensor that keeps them.

The `safetensors` library maps the file into memory. A mapped file that shrinks while it is
read (another program rewriting or truncating it) turns the next access to a page past its new
end into SIGBUS, which kills the process (a handler cannot recover: it returns to the faulting
instruction). So the file is opened once (`regular_file`: never a pipe or a device), its header
is read and checked (size, JSON bounds, every entry's dtype, shape and byte range: inside the
file, not overlapping another's, and exactly dtype size x elements long), and each tensor is
then `readinto` a tensor allocated with its dtype and shape: no second copy of a large model,
and a read that comes back short is one line saying the file ended early.

The format: 8 bytes little-endian header length N, N bytes of JSON
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}`, then
the data, offsets counted from its start.
"""

from __future__ import annotations

import contextlib
import math
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from transformer_viewer.model.checkpoints import load_watch
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import regular_file, untrusted_json
from transformer_viewer.model.files.file_errors import CHMOD, read_errors

MAX_HEADER = 100 << 20  # the format's own limit: larger is not a safetensors file
MAX_TENSORS = 20_000  # entries in one header; GPT-2 XL has 580
MAX_DIMS = 16  # a weight has 1-4 dimensions
FIX = "re-save or re-download it"
# The format's dtype names, as safetensors.torch maps them.
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64, "C64": torch.complex64,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E4M3FNUZ": torch.float8_e4m3fnuz, "F8_E5M2": torch.float8_e5m2,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
}


@dataclass(frozen=True)
class Entry:
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int  # byte offsets in the file (the header's offsets plus where the data starts)
    end: int


@dataclass(frozen=True)
class Header:
    metadata: dict[str, str]
    entries: dict[str, Entry]  # in the header's order


def looks_like_safetensors(head: bytes) -> bool:
    """The first bytes: a header length the format allows, then the header's opening brace."""
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 2 <= n <= MAX_HEADER and head[8:9] == b"{"


def read_header(path: str, f) -> Header:
    """The checked header of the safetensors file open as `f` (from `regular_file.open_regular`)."""
    size = regular_file.size_of(f)
    f.seek(0)
    first = f.read(8)
    (n,) = struct.unpack("<Q", first) if len(first) == 8 else (0,)
    if 8 + n > size:
        raise CheckpointError(f"{path}: truncated safetensors file: its header alone needs {8 + n} bytes, the file "
                              f"has {size}; {FIX}")
    if n > untrusted_json.MAX_JSON_BYTES:
        raise CheckpointError(f"{path}: its safetensors header is {n:,} bytes, more than the "
                              f"{untrusted_json.MAX_JSON_BYTES >> 20} MiB a model's header needs; {FIX}")
    text = f.read(n)
    if len(text) != n:
        raise _ended_early(path, 8 + len(text), 8 + n)
    raw = untrusted_json.parse(text, f"{path}: corrupt safetensors header", FIX)
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object); {FIX}")
    if len(raw) > MAX_TENSORS:
        raise CheckpointError(f"{path}: its safetensors header lists {len(raw):,} tensors, more than any model has "
                              f"({MAX_TENSORS:,}); {FIX}")
    metadata = raw.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"{path}: not a readable safetensors file: its header's __metadata__ is not a map of "
                              f"strings; {FIX}")
    start = 8 + n
    entries = {name: _entry(path, name, value, start) for name, value in raw.items()}
    need = max((e.end for e in entries.values()), default=start)
    if need > size:
        raise CheckpointError(f"{path}: truncated safetensors file: {need} bytes expected, {size} found; {FIX}")
    _check_no_overlap(path, entries)
    return Header(metadata, entries)


def _entry(path: str, name: str, value: object, start: int) -> Entry:
    where = f"{path}: not a readable safetensors file: its header's tensor {name[:80]!r}"
    if not isinstance(value, dict):
        raise CheckpointError(f"{where} is not an object with dtype, shape and data_offsets; {FIX}")
    dtype = DTYPES.get(value.get("dtype")) if isinstance(value.get("dtype"), str) else None
    if dtype is None:
        shown = str(value.get("dtype"))[:20]
        raise CheckpointError(f"{where} has dtype {shown!r}, which is none of the format's ({', '.join(DTYPES)}); "
                              f"{FIX}")
    shape, offsets = value.get("shape"), value.get("data_offsets")
    if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(_count(d) for d in shape)):
        raise CheckpointError(f"{where} has shape {str(shape)[:40]}, not a list of at most {MAX_DIMS} sizes; {FIX}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_count(o) for o in offsets)
            and offsets[0] <= offsets[1]):
        raise CheckpointError(f"{where} has data_offsets {str(offsets)[:40]}, not [begin, end] with begin <= end; "
                              f"{FIX}")
    nbytes = math.prod(shape) * dtype.itemsize
    if offsets[1] - offsets[0] != nbytes:
        raise CheckpointError(f"{where}: shape {shape} of {value['dtype']} needs {nbytes:,} bytes, its data_offsets "
                              f"span {offsets[1] - offsets[0]:,}; {FIX}")
    return Entry(dtype, tuple(shape), start + offsets[0], start + offsets[1])


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_no_overlap(path: str, entries: dict[str, Entry]) -> None:
    """Two tensors may not share bytes: each weight is stored once."""
    spans = sorted((e.begin, e.end, name) for name, e in entries.items() if e.end > e.begin)
    for (_b0, end0, name0), (begin1, _e1, name1) in zip(spans, spans[1:], strict=False):
        if begin1 < end0:
            raise CheckpointError(f"{path}: not a readable safetensors file: tensors {name0[:80]!r} and {name1[:80]!r} "
                                  f"overlap (their data_offsets share bytes); {FIX}")


def header_of(path: str) -> Header:
    with _opened(path) as f:
        return read_header(path, f)


def read_metadata(path: str) -> dict[str, str]:
    """The header's `__metadata__` (empty when it has none)."""
    with _opened(path) as f:
        return read_header(path, f).metadata


def read_file(path: str, skip: tuple[str, ...] = ()) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """(metadata, tensors by name) of the file, less tensors whose names start with a `skip` prefix."""
    with _opened(path) as f:
        header = read_header(path, f)
        tensors = {}
        for name, entry in header.entries.items():
            if skip and name.startswith(skip):
                continue
            load_watch.check_cancelled()
            tensors[name] = read_tensor(path, f, entry)
        return header.metadata, tensors


def read_tensors(path: str, skip: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    return read_file(path, skip)[1]


def read_tensor(path: str, f, entry: Entry) -> torch.Tensor:
    """One tensor, its bytes read straight into its own memory (bfloat16 and float8 have no
    NumPy dtype, so the read goes through a byte view of the same memory)."""
    t = torch.empty(entry.shape, dtype=entry.dtype)
    if entry.end == entry.begin:
        return t
    view = memoryview(t.view(-1).view(torch.uint8).numpy()).cast("B")  # (nbytes,) the tensor's own memory
    f.seek(entry.begin)
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])
        if not n:
            raise _ended_early(path, entry.begin + done, entry.end)
        done += n
    if sys.byteorder != "little":  # the format is little-endian
        t = _swapped(t)
    return t


def _swapped(t: torch.Tensor) -> torch.Tensor:
    size = t.element_size()
    if size == 1:
        return t
    as_bytes = t.view(-1).view(torch.uint8).view(-1, size).flip(-1).contiguous()  # (numel, itemsize) reversed
    return as_bytes.view(t.dtype).view(t.shape)


def _ended_early(path: str, got: int, wanted: int) -> CheckpointError:
    return CheckpointError(f"{path}: the file ended early (at byte {got:,} of the {wanted:,} its header promises): "
                           "it is truncated, or changed while it was read; wait until it is written completely, "
                           f"or {FIX}")


@contextlib.contextmanager
def _opened(path: str) -> Iterator:
    """`regular_file.open_regular(path, buffering=0)`, every OSError (opening or reading) one
    CheckpointError line."""
    with read_errors(path, "put the safetensors file itself there", "check the path", denied=CHMOD):
        f = regular_file.open_regular(path, buffering=0)
    with f:
        try:
            yield f
        except OSError as e:  # a read error of the disk or the network file system
            raise CheckpointError(f"{path}: cannot be read ({e.strerror or e}); copy the file to a local disk "
                                  "and retry") from None


def header_if_safetensors(path: str, head: bytes) -> Header | None:
    """The checked header when the file is safetensors (by its first bytes, `head`); truncation
    and every damage to the header is an error, not None."""
    if not looks_like_safetensors(head):
        return None
    return header_of(path)
