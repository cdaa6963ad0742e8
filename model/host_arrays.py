"""numpy arrays for a capture's large results, allocated by torch's CPU allocator.

numpy asks the kernel for transparent huge pages on every array over 4 MiB (madvise). Where
the kernel's defrag setting is `madvise` (its default), the first write to such an array may
stop to compact memory and clear 2 MiB pages: a fresh 35 MB overview array took 60 ms to fill
that way, against 11 ms from torch's allocator, about a tenth of a 256-token capture of a
30-layer model; after a long capture a head's 64 MiB pattern took 110-180 ms instead of 10-20.
The results are plain numpy arrays; the tensor that owns their memory is their base.
"""

from __future__ import annotations

import numpy as np
import torch


def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype (float16, float32, int64, bool, ...)."""
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def empty(shape, dtype) -> np.ndarray:
    """np.empty(shape, dtype), its memory from torch."""
    return torch.empty(shape, dtype=torch_dtype(dtype), device="cpu").numpy()


def zeros(shape, dtype) -> np.ndarray:
    """np.zeros(shape, dtype), its memory from torch."""
    return torch.zeros(shape, dtype=torch_dtype(dtype), device="cpu").numpy()
