"""The one way files are opened: only a regular file is read, decided on the open descriptor, and
nothing ever waits on a pipe (each FIFO below has no writer: a plain open would block forever)."""

from __future__ import annotations

import fcntl
import os
import socket
import sys

import pytest

from transformer_viewer.model.files import regular_file, untrusted_json


def test_a_regular_file_is_read_blocking_as_usual(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    with regular_file.open_regular(str(path)) as f:
        assert not fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
        assert regular_file.size_of(f) == 10 and f.read() == b"0123456789"
    assert regular_file.read_head(str(path), 4) == b"0123"
    assert regular_file.read_at_most(str(path), 3) == b"0123"  # one past the bound: the caller sees it is larger


@pytest.mark.parametrize("make, kind", [
    (lambda p: os.mkfifo(p), "a named pipe (FIFO), not a regular file"),
    (lambda p: os.symlink("/dev/null", p), "a character device behind a link to /dev/null, not a regular file"),
    (lambda p: os.mkdir(p), "a folder, not a regular file"),
    (lambda p: socket.socket(socket.AF_UNIX).bind(p), "a socket, not a regular file"),
])
def test_anything_else_is_refused_saying_what_it_is(tmp_path, make, kind):
    path = str(tmp_path / "thing")
    make(path)
    with pytest.raises(regular_file.NotRegularFile) as e:
        regular_file.open_regular(path)
    assert e.value.strerror == kind and isinstance(e.value, OSError)


@pytest.mark.parametrize("make, kind", [
    (lambda p: os.mkfifo(p), "a named pipe (FIFO), not a regular file"),
    (lambda p: socket.socket(socket.AF_UNIX).bind(p), "a socket or a device, not a regular file"),
])
def test_the_open_descriptor_decides_not_the_path(tmp_path, monkeypatch, make, kind):
    """A path swapped for a pipe after it was checked is still refused: fstat of what was opened."""
    path = str(tmp_path / "swapped")
    make(path)
    monkeypatch.setattr(regular_file, "check_regular", lambda _p: None)  # the check saw a regular file
    with pytest.raises(regular_file.NotRegularFile) as e:
        regular_file.open_regular(path)
    assert e.value.strerror == kind


def test_links_that_lead_nowhere_say_so(tmp_path):
    os.symlink("gone", tmp_path / "dangling")
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(FileNotFoundError, match="a symbolic link to gone, which does not exist"):
        regular_file.open_regular(str(tmp_path / "dangling"))
    with pytest.raises(OSError, match="a symbolic link loop"):
        regular_file.open_regular(str(tmp_path / "loop"))


def test_a_pipe_where_a_small_text_file_is_expected_is_ignored(tmp_path):
    """The cache's refs/main is only a hint: a pipe there is treated as no refs/main at all."""
    os.mkfifo(tmp_path / "main")
    assert untrusted_json.read_small_text(str(tmp_path / "main")) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="only Linux takes any bytes as a name")
def test_bytes_paths_that_are_not_utf8_open(tmp_path):
    folder = os.path.join(os.fsencode(str(tmp_path)), b"\xff\xfe")
    os.mkdir(folder)
    with open(os.path.join(folder, b"f"), "wb") as f:
        f.write(b"abc")
    assert regular_file.read_head(os.fsdecode(os.path.join(folder, b"f")), 3) == b"abc"
