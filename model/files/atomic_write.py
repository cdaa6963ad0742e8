"""Write a whole file or nothing: the bytes go to a temporary file beside the target, are
flushed to the disk and counted, and only then renamed over the target.

A writer that reports nothing (Qt's QSvgGenerator never does, and a library writing through
its own file handle may not either) can leave a short file on a full disk; renamed over the
user's file, that loses it. So every file is first rendered into memory, and the bytes are
written here by `os.write`, whose every short or failed write is seen. On any failure the
temporary file is removed, the target is untouched, and OSError says why; the caller turns
it into its own one-line error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile

CHUNK = 1 << 24  # bytes per os.write: large writes may be split by the kernel anyway


def replaced_mode(path: str | os.PathLike) -> int | None:
    """The permission bits a write over `path` keeps (None: no file there yet, a new file gets
    0666 minus the umask). Raises PermissionError for a read-only file (no write bit for anyone:
    `os.replace` would ignore the file's own mode, and so would root) and IsADirectoryError or
    OSError for something that is not a regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "it is a folder", os.fspath(path))
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "it is not a regular file (a device, a pipe or a socket)", os.fspath(path))
    if st.st_mode & 0o222 == 0:
        raise PermissionError(errno.EACCES, "the file is read-only; make it writable (chmod u+w) or choose "
                              "another name", os.fspath(path))
    return stat.S_IMODE(st.st_mode)


def write_bytes(path: str | os.PathLike, data: bytes | bytearray | memoryview) -> str:
    """Atomically make `path` hold exactly `data`; returns the absolute path written. A file
    replaced keeps its own permission bits; a read-only one is refused (see `replaced_mode`)."""
    return write_chunks(path, (data,))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_chunks(path: str | os.PathLike, chunks) -> str:
    """Atomically make `path` hold the concatenated `chunks` (an iterable of bytes-like pieces,
    never all in memory at once), every write checked; returns the absolute path written. A new
    file gets 0666 less the umask; a file replaced keeps its own mode, and a read-only one is
    refused before anything is written (`replaced_mode`). Whatever the iterable raises (a
    cancellation) removes the temporary file and propagates."""
    path = os.path.abspath(os.fspath(path))
    mode = replaced_mode(path)
    folder, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
    try:
        total = 0
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            written = 0
            while written < len(view):
                n = os.write(fd, view[written:written + CHUNK])
                if n <= 0:  # the kernel took nothing: treat as the full disk it almost always is
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                written += n
            total += written
        os.fsync(fd)  # delayed-allocation file systems report a full disk only here
        size = os.fstat(fd).st_size
        if size != total:
            raise OSError(errno.EIO, f"{size} of {total} bytes reached the disk")
        os.close(fd)
        fd = -1
        # mkstemp makes 0600; a new file is an ordinary one, a replaced one keeps its mode
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
