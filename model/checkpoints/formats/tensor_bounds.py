"""What a checkpoint can make us allocate, bounded by what it really stores; and what a tensor in
it may be at all.

Only dense tensors laid out in strides in CPU memory, of real-number or bool dtypes, pass: a
torch pickle can also hold sparse (COO, CSR, ...), meta (shape without data), quantized, nested,
complex or raw-bits tensors, which have no storage to bound, no values to check or no place in
a state dict of weights; each is refused in one line before anything touches its data. (Which
real dtypes a weight may have is the model builder's check: float8 converts to float32, float4
does not.)

A torch pickle stores storages and, separately, views of them (shape, stride, offset). A view
with stride 0 repeats one stored value along a dimension, so a 4 KB file can describe a
612M-parameter model whose weights exist only once materialised (`.contiguous()`, a dtype
change, the finiteness check): gigabytes for kilobytes. Checked here, right after unpickling
and before anything is materialised:

- no tensor may hold more elements than its storage (stride 0, or strides that overlap);
- all tensors together may hold at most twice what the storages do, plus a little (a tied
  head shares the embedding's storage, so one sharing is normal; hundreds are not);
- a model's float32 weights may take at most three quarters of this machine's memory (and
  never more than MAX_PARAMS parameters), checked from the config before any weight is read.
"""

from __future__ import annotations

import torch

from transformer_viewer.model.device import physical_memory
from transformer_viewer.model.errors import CheckpointError

MAX_PARAMS = 100_000_000_000  # whatever the machine: 400 GB as float32
MEMORY_SHARE = 0.75  # of the machine's memory the float32 weights may take; the capture needs the rest
SHARING_FACTOR = 2  # the tied head: two names, one storage
SHARING_SLACK = 1 << 20  # bytes: small buffers saved as views of each other
MAX_OBJECTS = 1_000_000  # containers and values walked in one checkpoint


def check_stored(path: str, obj: object) -> None:
    """Refuse a loaded checkpoint whose tensors describe more data than its storages hold."""
    logical = stored = 0
    storages: set[tuple[int, int]] = set()
    for name, t in _tensors(path, obj):
        check_plain(path, name, t)
        storage = t.untyped_storage()
        if t.numel() * t.element_size() > storage.nbytes():
            raise CheckpointError(f"{path}: tensor {name} repeats its stored values (shape {tuple(t.shape)}, strides "
                                  f"{tuple(t.stride())}, {storage.nbytes():,} bytes stored); a real checkpoint stores "
                                  "every weight: re-save it from the model's state_dict()")
        logical += t.numel() * t.element_size()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in storages:
            storages.add(key)
            stored += storage.nbytes()
    if logical > SHARING_FACTOR * stored + SHARING_SLACK:
        raise CheckpointError(f"{path}: its tensors share storage: they describe {logical:,} bytes but the file stores "
                              f"{stored:,}; a real checkpoint stores each weight once: re-save it from the model's "
                              "state_dict()")


def check_plain(path: str, name: str, t: torch.Tensor) -> None:
    """Refuse a tensor that is not dense, strided, on the CPU and of a real-number or bool dtype.
    Read from its attributes only: a sparse or meta tensor raises on most operations."""
    kind = None
    if t.is_sparse or t.layout != torch.strided:
        kind = f"a sparse tensor (layout {str(t.layout).removeprefix('torch.')})"
    elif t.is_nested:
        kind = "a nested tensor"
    elif t.is_quantized:
        kind = f"a quantized tensor ({str(t.dtype).removeprefix('torch.')})"
    elif t.device.type == "meta":
        kind = "a meta tensor (a shape without any values)"
    elif t.device.type != "cpu":
        kind = f"a tensor on device {t.device.type}"
    elif t.dtype.is_complex or str(t.dtype).startswith("torch.bits"):
        kind = f"a tensor of dtype {str(t.dtype).removeprefix('torch.')}"
    if kind is not None:
        raise CheckpointError(f"{path}: tensor {name} is {kind}; a checkpoint holds dense CPU tensors of real "
                              "numbers: re-save it from the model's state_dict()")


def max_params() -> int:
    """The most parameters a model may have on this machine (weights are float32 on the CPU)."""
    return min(MAX_PARAMS, int(physical_memory() * MEMORY_SHARE) // 4)


def check_param_count(source: str, n_params: int) -> None:
    limit = max_params()
    if n_params > limit:
        raise CheckpointError(f"{source}: the model has {n_params:,} parameters, {n_params * 4 / (1 << 30):.1f} GiB "
                              f"as float32, more than fits in this machine's memory ({physical_memory() / (1 << 30):.0f}"
                              f" GiB: up to {limit:,} parameters); use a smaller model")


def _tensors(path: str, obj: object):
    """(name, tensor) for every tensor in nested dicts, lists and tuples; each container once,
    so a pickle's shared references cannot make the walk exponential."""
    seen: set[int] = set()
    stack: list[tuple[str, object]] = [("", obj)]
    walked = 0
    while stack:
        name, value = stack.pop()
        walked += 1
        if walked > MAX_OBJECTS:
            raise CheckpointError(f"{path}: holds more than {MAX_OBJECTS:,} objects, which no model checkpoint "
                                  "does; save the model's state_dict()")
        if isinstance(value, torch.Tensor):
            yield name or "(top level)", value
        elif isinstance(value, dict | list | tuple):
            if id(value) in seen:
                continue
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((f"{name}.{k}" if name else str(k), v) for k, v in items)
