"""The one way a file the user gave (or a folder brought along) is opened for reading.

A path can name anything: a named pipe, whose open blocks until someone writes to it; a
character device such as /dev/zero, which never ends; a socket; a folder. Checking the path
first (`os.path.isfile`) leaves a gap: it can be swapped between the check and the open. So the
file is opened with `O_NONBLOCK` (a pipe's open returns at once instead of waiting for a
writer), the OPEN DESCRIPTOR is checked with `fstat` (what was opened is what is read), and only
a regular file is read, from that descriptor; `O_NONBLOCK` is then cleared, as it means nothing
for a regular file. The path is also `stat`ed before the open, so a device is never opened at all
(opening some devices does something). Libraries that would open a path themselves (torch,
zipfile, safetensors) are handed the open file or its bytes instead.

Anything that is not a regular file raises `NotRegularFile`, an OSError whose `strerror` says
what was found ("a named pipe (FIFO), not a regular file"), so each caller's own handling of
OSError turns it into its one line with its own advice.
"""

from __future__ import annotations

import errno
import io
import os
import stat

try:
    import fcntl
except ImportError:  # Windows: no O_NONBLOCK to clear, and no FIFO a path could name
    fcntl = None

# The flags that exist here (Windows has none but O_BINARY; POSIX none of that one).
_FLAGS = os.O_RDONLY | sum(getattr(os, flag, 0) for flag in ("O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC", "O_BINARY"))


class NotRegularFile(OSError):
    """The path names something other than a regular file (a pipe, a device, a socket, a folder)."""


def kind_of(mode: int) -> str:
    """What a file of this `st_mode` is, in a few words a user knows."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a special file"


def not_regular(path: str | bytes, mode: int) -> NotRegularFile:
    kind = kind_of(mode)
    link = ""
    if os.path.islink(path):
        try:
            link = f" behind a link to {os.fsdecode(os.readlink(path))}"
        except OSError:
            link = " behind a link"
    return NotRegularFile(errno.EINVAL, f"{kind}{link}, not a regular file", os.fsdecode(path))


def check_regular(path: str | bytes) -> os.stat_result:
    """The path's stat when it is a regular file; else NotRegularFile (or the OSError of stat,
    saying so when a symbolic link is what leads nowhere)."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ELOOP) and os.path.islink(path):
            raise _broken_link(path, e.errno) from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    return st


def _broken_link(path: str | bytes, code: int) -> OSError:
    if code == errno.ELOOP:
        return OSError(code, "a symbolic link loop (following it never reaches a file)", os.fsdecode(path))
    try:
        target = os.fsdecode(os.readlink(path))
    except OSError:
        target = "?"
    return FileNotFoundError(code, f"a symbolic link to {target}, which does not exist", os.fsdecode(path))


def open_regular(path: str | bytes, buffering: int = -1) -> io.BufferedReader | io.FileIO:
    """`path` open for reading, checked on its descriptor to be a regular file; `buffering=0`
    gives the raw file (for `readinto` straight into a tensor's memory). Raises OSError
    (FileNotFoundError, PermissionError, NotRegularFile, ...); never blocks on a pipe."""
    check_regular(path)  # a device is refused before it is opened
    try:
        fd = os.open(path, _FLAGS)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket (or a device without a driver) cannot be opened
            raise NotRegularFile(errno.ENXIO, "a socket or a device, not a regular file", os.fsdecode(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped after the check above: the descriptor decides
            raise not_regular(path, st.st_mode)
        if fcntl is not None:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def size_of(f) -> int:
    """The size of an open file, from its descriptor."""
    return os.fstat(f.fileno()).st_size


def size_of_path(path: str | bytes) -> int:
    """The size `stat` gives (0 when it cannot), for messages only: what is read is bounded by
    the descriptor's own size."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def read_at_most(path: str | bytes, max_bytes: int) -> bytes:
    """Up to `max_bytes + 1` bytes of the regular file `path` (one more than allowed, so the
    caller sees a file that is larger than it may be, or grew while it was read)."""
    with open_regular(path) as f:
        return f.read(max_bytes + 1)


def read_head(path: str | bytes, n: int) -> bytes:
    """Up to `n` bytes from the start of the regular file `path`."""
    with open_regular(path) as f:
        return f.read(n)


def exists(path: str | bytes) -> bool:
    """Whether anything is at `path` (a broken link too): a name that is there but is no regular
    file is then read, and refused saying what it is, instead of being called missing."""
    return os.path.lexists(path)
