"""model/files/atomic_write.py: a replaced file keeps its mode, a new one gets 0666 minus the umask, a
read-only file or something that is not a regular file is refused before anything is written."""

import os
import stat

import pytest

from transformer_viewer.model.files.atomic_write import replaced_mode, write_bytes


def test_a_new_file_gets_0666_minus_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        path = write_bytes(tmp_path / "new.bin", b"abc")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert open(path, "rb").read() == b"abc"


def test_a_replaced_file_keeps_its_own_mode(tmp_path):
    path = tmp_path / "kept.bin"
    path.write_bytes(b"old")
    os.chmod(path, 0o604)
    write_bytes(path, b"new")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o604 and path.read_bytes() == b"new"


def test_a_read_only_file_is_refused_and_kept_even_for_root(tmp_path):
    path = tmp_path / "ro.bin"
    path.write_bytes(b"mine")
    os.chmod(path, 0o444)
    with pytest.raises(PermissionError, match="read-only"):
        write_bytes(path, b"theirs")
    assert path.read_bytes() == b"mine" and os.listdir(tmp_path) == ["ro.bin"]


def test_a_fifo_or_a_folder_is_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        write_bytes(fifo, b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(IsADirectoryError):
        replaced_mode(tmp_path)
