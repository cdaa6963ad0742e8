"""numpy arrays for a capture's large results, allocated by torch's CPU allocator and recycled.

numpy asks the kernel for transparent huge pages on every array over 4 MiB (madvise). Where
the kernel's defrag setting is `madvise` (its default), the first write to such an array may
stop to compact memory and clear 2 MiB pages: filling a fresh overview array or a long
prompt's head pattern that way takes several times longer than from torch's allocator, a
sizeable share of a capture.
The results are plain numpy arrays; the tensor that owns their memory is their base.

Even from torch's allocator, a buffer over glibc's mmap threshold (32 MiB at most) comes fresh
from the kernel and page-faults on its first write. The window keeps two traces (the clean run
and the one on screen) while a third is captured, so every capture wrote into fresh pages:
9-18 thousand faults at 256 tokens on a 30-layer, 9-head model, 16-39 thousand at 1,024.
`empty` therefore lends buffers of 1-256 MiB from a small pool: once every array over a buffer
is gone (the trace that held it was dropped), the next request of the same size gets it back,
its pages already mapped. A request no idle buffer fits releases the idle ones first, so a
prompt of another length never holds old and new buffers at once.
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
import torch

POOLED_BYTES = (1 << 20, 256 << 20)  # buffers of this many bytes (inclusive) are recycled
MAX_POOLED = 12  # buffers the pool keeps, lent or idle (a capture asks for two or three)

_pool: list[np.ndarray] = []  # 1-D uint8 roots; every array lent over one keeps it referenced
_lock = threading.Lock()


def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (float16, float32, int64, bool, ...)."""
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def _fresh(shape, dtype) -> np.ndarray:
    return torch.empty(shape, dtype=torch_dtype(dtype), device="cpu").numpy()


def _idle(i: int) -> bool:
    """No array over buffer i is alive: the only references are the pool's and this call's."""
    return sys.getrefcount(_pool[i]) <= 2


def empty(shape, dtype) -> np.ndarray:
    """np.empty(shape, dtype), its memory from torch; a large one from the pool when one is idle."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    if not POOLED_BYTES[0] <= nbytes <= POOLED_BYTES[1]:
        return _fresh(shape, dtype)
    with _lock:
        for i in range(len(_pool)):
            if _pool[i].nbytes == nbytes and _idle(i):
                # Views collapse their base to the root, so each one keeps it referenced.
                return _pool[i].view(dtype).reshape(shape)
        # Nothing idle fits: let the idle buffers go before taking new memory, so the pool
        # never adds to a capture's peak.
        _drop_idle()
        root = _fresh((nbytes,), np.uint8)
        if len(_pool) < MAX_POOLED:
            _pool.append(root)
        return root.view(dtype).reshape(shape)


def pooled_bytes() -> tuple[int, int]:
    """(bytes lent out, bytes idle) in the pool."""
    with _lock:
        idle = [_idle(i) for i in range(len(_pool))]
        sizes = [a.nbytes for a in _pool]
    return (sum(s for s, i in zip(sizes, idle, strict=True) if not i),
            sum(s for s, i in zip(sizes, idle, strict=True) if i))


def release_idle() -> None:
    """Give the idle buffers back (to the allocator, and so to the system)."""
    with _lock:
        _drop_idle()


def _drop_idle() -> None:
    """Forget the idle buffers (the caller holds the lock)."""
    _pool[:] = [_pool[i] for i in range(len(_pool)) if not _idle(i)]


def zeros(shape, dtype) -> np.ndarray:
    """np.zeros(shape, dtype), its memory from torch."""
    return torch.zeros(shape, dtype=torch_dtype(dtype), device="cpu").numpy()
