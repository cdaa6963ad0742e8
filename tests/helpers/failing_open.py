"""Make every way of opening one file fail, as the kernel or a failing disk would.

The project opens files with `os.open` (regular_file) and libraries or tests may still use the
built-in `open`; both are patched, and their calls for the file counted together, so `from_call`
can let the first opens through and fail a later one."""

from __future__ import annotations

import builtins
import os


def fail_opens(monkeypatch, path, make_error, from_call: int = 1) -> None:
    """Opens of `path` (by either function) from the `from_call`-th on raise `make_error(path)`."""
    target = os.path.abspath(os.fsdecode(path))
    real_open, real_os_open, calls = builtins.open, os.open, {"n": 0}

    def hit(file) -> bool:
        if not isinstance(file, str | bytes | os.PathLike) or os.path.abspath(os.fsdecode(file)) != target:
            return False
        calls["n"] += 1
        return calls["n"] >= from_call

    def failing_open(file, *a, **kw):
        if hit(file):
            raise make_error(os.fsdecode(file))
        return real_open(file, *a, **kw)

    def failing_os_open(file, *a, **kw):
        if hit(file):
            raise make_error(os.fsdecode(file))
        return real_os_open(file, *a, **kw)

    monkeypatch.setattr(builtins, "open", failing_open)
    monkeypatch.setattr(os, "open", failing_os_open)


def refuse_reads_of(monkeypatch, path: str) -> str:
    """We run as root, for whom chmod 000 does not stop reads: make open() refuse `path` as the
    kernel would for a normal user (PermissionError, errno 13). Returns how it was simulated."""
    os.chmod(path, 0)
    if not os.access(path, os.R_OK):
        return "chmod"  # a normal user: the real thing
    fail_opens(monkeypatch, path, lambda name: PermissionError(13, "Permission denied", name))
    return "monkeypatched opens"
