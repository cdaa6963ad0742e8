"""A Gemma Scope `params.npz`: an SAE's weights and nothing else, read as untrusted input.

The file is a zip of `.npy` arrays (`W_enc`, `W_dec`, `b_enc`, `b_dec`, `threshold`; SAELens
also accepts lower-case `w_enc`/`w_dec`). Each member's header (dtype and shape) is read first,
from the zip's own member, and checked (plain little-endian floats, the shapes of one SAE,
within the memory budget) before any array is allocated; the arrays are then read with
`np.load(allow_pickle=False)` from the file opened once through `regular_file`.
"""

from __future__ import annotations

import math
import zipfile

import numpy as np
import torch

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files import regular_file
from transformer_viewer.model.files.file_errors import read_errors

NAMES = {"W_enc": "W_enc", "w_enc": "W_enc", "W_dec": "W_dec", "w_dec": "W_dec", "b_enc": "b_enc",
         "b_dec": "b_dec", "threshold": "threshold"}
MAX_MEMBERS = 16
MAX_HEADER = 10_000  # numpy's own bound on an .npy header
FIX = "it is not a Gemma Scope params.npz; re-download it"


def read_shapes(path: str, f) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) of each array in the open npz `f`, by our name, from the member headers alone."""
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise ModelError(f"{path}: not a readable .npz ({e}); {FIX}") from None
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ModelError(f"{path}: {len(infos):,} arrays, more than an SAE has; {FIX}")
    out = {}
    for info in infos:
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        if key not in NAMES:
            raise ModelError(f"{path}: holds {key[:40]!r}, which is no SAE weight ({', '.join(sorted(set(NAMES.values())))}); "
                             f"{FIX}")
        try:
            with zf.open(info) as member:
                version = np.lib.format.read_magic(member)
                reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, fortran, dtype = reader(member, max_header_size=MAX_HEADER)
        except (ValueError, OSError, zipfile.BadZipFile, EOFError, SyntaxError) as e:
            raise ModelError(f"{path}: the header of {key!r} cannot be read ({str(e)[:80]}); {FIX}") from None
        if dtype.kind != "f" or dtype.hasobject or dtype.byteorder == ">" or fortran:
            raise ModelError(f"{path}: {key!r} is stored as {dtype.str}{' (Fortran order)' if fortran else ''}, not "
                             f"plain little-endian floats; {FIX}")
        out[NAMES[key]] = (tuple(int(d) for d in shape), dtype)
    return out


def read_arrays(path: str, f) -> dict[str, torch.Tensor]:
    """The arrays of the open npz `f` as float32 tensors by our name (headers already checked)."""
    f.seek(0)
    out = {}
    try:
        with np.load(f, allow_pickle=False) as data:
            for key in data.files:
                out[NAMES[key]] = torch.from_numpy(np.ascontiguousarray(data[key], dtype=np.float32))
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise ModelError(f"{path}: an array cannot be read ({str(e)[:80]}); {FIX}") from None
    return out


def opened(path: str):
    """The npz open for reading, a regular file only (a failure is one line)."""
    with read_errors(path, "give the params.npz file itself", "check the path"):
        return regular_file.open_regular(path)


def n_elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
