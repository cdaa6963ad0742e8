"""What every export shares, before anything is drawn: the formats, the one-line ExportError, the
checks of the file to write, and `write_file`, the only way an export reaches the disk (atomic:
model/files/atomic_write.py). No Qt here."""

from __future__ import annotations

import os

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files.atomic_write import replaced_mode, write_bytes

IMAGE_FORMATS = (".png", ".svg", ".pdf")
MATRIX_FORMATS = (".npy", ".csv")
FORMATS = IMAGE_FORMATS + MATRIX_FORMATS


class ExportError(ModelError):
    """An export that cannot be written; one line saying what to do. A ModelError, so the CLI's
    run_guarded and the app's error dialog treat it like every other user-facing error."""


def extension(path) -> str:
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in FORMATS:
        shown = ext or "no extension"
        raise ExportError(f"cannot export to {os.fspath(path)!r} ({shown}): use a file name ending in {', '.join(FORMATS)}")
    return ext


def check_writable(path) -> str:
    """The absolute path, after checking its folder exists and is a folder we can write."""
    path = os.fspath(path)
    if "\x00" in path:  # os calls would raise ValueError, not OSError
        raise ExportError(f"cannot write {path!r}: a file name cannot contain a NUL character; choose another name")
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise ExportError(f"cannot write {path}: it is a folder; give a file name inside it")
    if not os.path.isdir(folder):
        raise ExportError(f"cannot write {path}: the folder {folder} does not exist; create it or choose another")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write {path}: the folder {folder} is not writable; choose a folder you can write to")
    try:
        replaced_mode(path)
    except OSError as e:
        raise ExportError(f"cannot write {path}: {e.strerror}") from None
    return path


def write_file(path, data: bytes) -> str:
    """Atomically make `path` hold exactly `data` (see model/files/atomic_write.py); one ExportError
    line on any failure, the previous file untouched. Returns the absolute path."""
    path = check_writable(path)
    try:
        return write_bytes(path, data)
    except PermissionError as e:
        raise ExportError(f"cannot write {path}: {e.strerror or e}; choose a folder you can write to") from None
    except OSError as e:
        raise ExportError(f"cannot write {path}: {e.strerror or e}; check the disk and the folder's permissions") from None
