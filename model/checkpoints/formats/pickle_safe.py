"""Reading untrusted torch pickles: `torch.load(weights_only=True)` only, every failure one line.

weights_only refuses any pickle that names a class or function outside torch's short list of
tensor types, so a file that would run code is rejected before anything in it runs. A bare
Python pickle (not torch's format) is never handed to an unpickler at all: its opcodes are
scanned with `pickletools`, which executes nothing, to say what code it would need.
"""

from __future__ import annotations

import collections
import pickle
import pickletools
import re
import warnings
import zipfile

import torch

from transformer_viewer.model.checkpoints.formats import tensor_bounds
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import regular_file
from transformer_viewer.model.files.file_head import read_head

ZIP_MAGIC = b"PK\x03\x04"
MAX_REBUILDS = 20_000  # GPT-2 XL's state with AdamW moments and their steps needs about 4,600
_BUILD_OPS = frozenset({"REDUCE", "NEWOBJ", "NEWOBJ_EX"})
ZIP_EXPANSION = 2  # unpacked/packed size a torch zip may have (its entries are stored, not deflated)
PICKLE_PROTO = 0x80
# torch's pre-1.6 format begins with a pickled LONG1 magic number; a bare pickle does not.
LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
_GLOBAL_IN_MESSAGE = re.compile(r"GLOBAL ([\w.]+)")
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8", "SHORT_BINSTRING", "BINSTRING", "STRING"}


def looks_like_pickle(head: bytes) -> bool:
    """Zip (torch >= 1.6) or a pickle protocol header (legacy torch, bare pickle)."""
    return head.startswith(ZIP_MAGIC) or (len(head) >= 2 and head[0] == PICKLE_PROTO and 2 <= head[1] <= 5)


def load(path: str) -> object:
    """The object a torch checkpoint holds, loaded on the CPU without running any code. The file
    is opened once (`regular_file`: never a pipe or a device) and every reader below, torch's
    included, reads that open file, never the path again."""
    head = read_head(path, 16)
    if not head.startswith(ZIP_MAGIC) and not head.startswith(LEGACY_MAGIC):
        raise _bare_pickle_error(path)
    try:
        f = regular_file.open_regular(path)
    except PermissionError:
        raise CheckpointError(f"{path}: permission denied; make the file readable (chmod +r) and retry") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e}); check the path") from None
    with f:
        zipped = head.startswith(ZIP_MAGIC)
        try:
            if zipped:
                _check_zip(path, f)
            _check_object_count(path, f, zipped=zipped)
            f.seek(0)
        except OSError as e:
            raise CheckpointError(f"{path}: cannot be read ({e.strerror or e}); check the path") from None
        try:
            # Quiet: rebuilding a sparse CSR or a quantized tensor makes torch print a "beta" or
            # deprecation warning, a stray paragraph before the one line that refuses such a tensor.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = torch.load(f, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            message = str(e)
            if "GLOBAL" in message or "global" in message:
                raise _refused(path, message) from None
            raise CheckpointError(f"{path}: truncated or corrupt pickle inside the checkpoint "
                                  f"({_weights_only_reason(message)}); re-save or re-download it") from None
        except PermissionError:
            raise CheckpointError(f"{path}: permission denied; make the file readable (chmod +r) and retry") from None
        except (EOFError, RuntimeError, ValueError, OSError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{path}: truncated or corrupt torch checkpoint ({_first_line(e)}); re-save or "
                                  "re-download it") from None
    tensor_bounds.check_stored(path, obj)  # before anything materialises a view
    return obj


def _check_zip(path: str, f) -> None:
    """Catch a truncated or foreign zip before torch does, with a plainer message."""
    try:
        f.seek(0)
        with zipfile.ZipFile(f) as z:
            infos = z.infolist()
            names = [i.filename for i in infos]
            unpacked, packed = sum(i.file_size for i in infos), regular_file.size_of(f)
    except zipfile.BadZipFile:
        raise CheckpointError(f"{path}: truncated or corrupt zip archive (its central directory is missing); "
                              "re-save or re-download it") from None
    if not any(n.endswith("data.pkl") for n in names):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise CheckpointError(f"{path}: a zip archive that is not a torch checkpoint (it holds {shown or 'nothing'}); "
                              "give a checkpoint file instead")
    if unpacked > ZIP_EXPANSION * packed + (1 << 20):  # torch.save stores entries uncompressed
        raise CheckpointError(f"{path}: its zip entries unpack to {unpacked:,} bytes from {packed:,}; torch never "
                              "compresses a checkpoint, so this is not one saved by torch.save")


def _check_object_count(path: str, f, zipped: bool) -> None:
    """torch's weights-only unpickler is pure Python, about 0.15 ms per tensor it rebuilds: a
    small pickle of views can take minutes. Its object-building opcodes are counted first, by
    `pickletools`, ten times faster and executing nothing."""
    try:
        f.seek(0)
        if zipped:
            with zipfile.ZipFile(f) as z:
                name = next(n for n in z.namelist() if n.endswith("data.pkl"))
                with z.open(name) as stream:
                    n = _rebuilds(stream, pickles=1)
        else:  # magic number, protocol, system info, then the state
            n = _rebuilds(f, pickles=4)
    except (OSError, zipfile.BadZipFile, StopIteration):
        return  # torch.load reports these with its own line
    if n > MAX_REBUILDS:
        raise CheckpointError(f"{path}: its pickle builds more than {MAX_REBUILDS:,} objects (two per tensor), more "
                              "than any model checkpoint; save only the model's state_dict()")


def _rebuilds(stream, pickles: int) -> int:
    n = 0
    try:
        for _ in range(pickles):
            for op, _arg, _pos in pickletools.genops(stream):
                if op.name in _BUILD_OPS:
                    n += 1
                    if n > MAX_REBUILDS:
                        return n
    except (ValueError, EOFError, UnicodeDecodeError):
        pass  # a damaged pickle: torch.load says so
    return n


def _refused(path: str, message: str) -> CheckpointError:
    m = _GLOBAL_IN_MESSAGE.search(message)
    what = f" (it references {m.group(1)})" if m else ""
    return CheckpointError(
        f"{path}: this pickle needs code to load{what}; refused, because unpickling it could run arbitrary code. "
        "Re-save it as a plain state dict (torch.save(model.state_dict(), ...)) or as safetensors")


def _bare_pickle_error(path: str) -> CheckpointError:
    """A pickle not written by torch.save: tell code-carrying from merely foreign, executing nothing."""
    try:
        with regular_file.open_regular(path) as f:  # streamed: a huge file is never read whole
            globals_ = _pickle_globals(f)
    except (ValueError, EOFError, pickle.UnpicklingError, UnicodeDecodeError):
        return CheckpointError(f"{path}: truncated or corrupt pickle; re-save or re-download it")
    except OSError as e:
        return CheckpointError(f"{path}: cannot be read ({e.strerror or e}); check the path")
    if globals_:
        return _refused(path, f"GLOBAL {globals_[0]}")
    return CheckpointError(f"{path}: a plain Python pickle holding no tensors, not a torch checkpoint; "
                           "save the model with torch.save(model.state_dict(), ...)")


def _pickle_globals(stream) -> list[str]:
    """The first class/function a pickle would import (a list, empty if none), read from its
    opcodes only; the scan stops there, and keeps only the last two strings it passed."""
    strings: collections.deque[str] = collections.deque(maxlen=2)
    for op, arg, _pos in pickletools.genops(stream):
        if op.name in _STRING_OPS:
            strings.append(arg if isinstance(arg, str) else arg.decode("latin-1"))
        elif op.name in ("GLOBAL", "INST"):
            return [str(arg).replace(" ", ".")]
        elif op.name == "STACK_GLOBAL":
            return [".".join(strings) if len(strings) == 2 else "an unnamed global"]
    return []


def _weights_only_reason(message: str) -> str:
    """torch's weights_only message is a paragraph; keep its one informative line."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("Weights only load failed", "Please file an issue", "Check the documentation")):
            return ln[:200]
    return "unreadable pickle"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    line = text[0] if text else type(e).__name__
    return line[:200]
