"""Writers on a full disk: every file we write (exports of each format, checkpoints, train's
snapshots and optimizer state) goes whole or not at all. The disk is simulated at `os.write`,
the call every writer now goes through: it takes part of each request, then raises ENOSPC.
The user's previous file must survive byte for byte, no temporary file may stay behind, and
the command line says one line and exits 2."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from tests.hardening.message_case import raised
from tests.helpers.hardening import PROMPT, TINY, one_line
from tests.helpers.training import write_text
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import atomic_write
from transformer_viewer.viewer.cli.main import main

REAL_WRITE = os.write
ORIGINAL = b"the user's previous file, which must survive\n" * 50


def full_after_half(fd, data):
    """Part of each request reaches the disk, then it is full (as a nearly full disk behaves)."""
    n = len(data) // 2
    if n:
        return REAL_WRITE(fd, bytes(data[:n]))
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def takes_nothing(_fd, _data):
    return 0


def fsync_full(_fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    return out


def existing(folder, name) -> str:
    path = folder / name
    path.write_bytes(ORIGINAL)
    return str(path)


def untouched(folder, path) -> bool:
    return open(path, "rb").read() == ORIGINAL and sorted(os.listdir(folder)) == [os.path.basename(path)]


# -- the helper itself ------------------------------------------------------------------------------
@pytest.mark.parametrize("attr,fault,code", [("write", full_after_half, errno.ENOSPC),
                                             ("write", takes_nothing, errno.ENOSPC),
                                             ("fsync", fsync_full, errno.ENOSPC)],
                         ids=["short writes then full", "write takes nothing", "fsync reports the full disk"])
def test_the_helper_never_replaces_a_file_with_a_short_one(folder, monkeypatch, attr, fault, code):
    path = existing(folder, "f.bin")
    monkeypatch.setattr(os, attr, fault)
    with pytest.raises(OSError) as info:
        atomic_write.write_bytes(path, os.urandom(100_000))
    monkeypatch.undo()
    assert info.value.errno == code
    assert untouched(folder, path)


def test_the_helper_compares_the_size_that_reached_the_disk(folder, monkeypatch):
    """A file system that accepts every write but stores less (the size check is the last guard)."""
    path = existing(folder, "f.bin")
    real_fstat = os.fstat

    class Short:
        def __init__(self, st):
            self.st_size = st.st_size - 1

    monkeypatch.setattr(os, "fstat", lambda fd: Short(real_fstat(fd)))
    with pytest.raises(OSError) as info:
        atomic_write.write_bytes(path, b"x" * 1000)
    monkeypatch.undo()
    assert info.value.errno == errno.EIO and "999 of 1000 bytes" in str(info.value)
    assert untouched(folder, path)


def test_the_helper_writes_exactly_the_bytes(folder):
    data = os.urandom(3 * 1024 * 1024 + 7)
    path = atomic_write.write_bytes(folder / "new.bin", memoryview(data))
    assert open(path, "rb").read() == data and sorted(os.listdir(folder)) == ["new.bin"]
    mode = os.stat(path).st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask  # an ordinary file, not mkstemp's 0600


# -- exports through the command line -----------------------------------------------------------------
@pytest.mark.parametrize("name,extra", [("a.png", []), ("a.svg", []), ("a.npy", []), ("a.csv", []),
                                        ("g.svg", ["--view", "grid"]), ("r.png", ["--view", "residual"])])
def test_export_on_a_full_disk_keeps_the_previous_file(tiny_ckpt, folder, monkeypatch, capsys, name, extra):
    path = existing(folder, name)
    argv = ["export", "--checkpoint", tiny_ckpt, "--prompt", PROMPT, *extra, "--out", path]
    monkeypatch.setattr(os, "write", full_after_half)
    rc = main(argv)
    monkeypatch.undo()
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("error: cannot write") and "no space left on device" in lines[0].lower()
    assert untouched(folder, path)
    assert main(argv) == 0 and open(path, "rb").read() != ORIGINAL  # the disk is fine again: it is written
    assert sorted(os.listdir(folder)) == [name]


# -- checkpoints and training ---------------------------------------------------------------------------
def test_save_checkpoint_on_a_full_disk_keeps_the_previous_checkpoint(folder, monkeypatch, tiny_ckpt):
    path = str(folder / "m.safetensors")
    with open(tiny_ckpt, "rb") as f:
        before = f.read()
    with open(path, "wb") as f:
        f.write(before)
    torch.manual_seed(3)
    monkeypatch.setattr(os, "write", full_after_half)
    message = raised(lambda: save_checkpoint(GPT(TINY), path), CheckpointError)
    monkeypatch.undo()
    assert one_line(message) and "cannot write" in message and "No space left on device" in message
    assert open(path, "rb").read() == before and sorted(os.listdir(folder)) == ["m.safetensors"]
    assert load_checkpoint(path).config == TINY


TRAIN_FLAGS = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
               "--steps", "4", "--warmup", "1", "--eval-every", "2", "--eval-batches", "2", "--val-fraction", "0.2",
               "--device", "cpu", "--seed", "5", "--keep-optimizer"]  # the .optim file stays for --resume


@pytest.mark.parametrize("fail_on", ["checkpoint", "optimizer"])
def test_train_snapshot_on_a_full_disk_is_one_line_and_keeps_the_last_snapshot(tmp_path, monkeypatch, capsys,
                                                                               fail_on):
    data = write_text(tmp_path / "text.txt")
    folder = tmp_path / "run"
    folder.mkdir()
    out = str(folder / "m.safetensors")
    assert main(["train", "--data", data, "--out", out, *TRAIN_FLAGS]) == 0
    capsys.readouterr()
    saved = {name: open(folder / name, "rb").read() for name in os.listdir(folder)}
    assert set(saved) == {"m.safetensors", "m.safetensors.optim"}
    # Resume for two more steps; the disk fills at the checkpoint, or at the optimizer state after it.
    from transformer_viewer.model.checkpoints.formats import native

    writes = {"files": 0}
    real = native.write_bytes

    def count_files(path, data_):
        writes["files"] += 1
        return real(path, data_)

    monkeypatch.setattr(native, "write_bytes", count_files)

    def full_at_the_chosen_file(fd, chunk):
        if fail_on == "checkpoint" or writes["files"] >= 2:
            return full_after_half(fd, chunk)
        return REAL_WRITE(fd, chunk)

    monkeypatch.setattr(os, "write", full_at_the_chosen_file)
    more = [f if f != "4" else "6" for f in TRAIN_FLAGS]
    rc = main(["train", "--data", data, "--out", out, *more, "--resume"])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "SafetensorError" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: cannot write") and "No space left on device" in last
    assert sorted(os.listdir(folder)) == sorted(saved), "a temporary file was left behind"
    if fail_on == "checkpoint":
        assert {name: open(folder / name, "rb").read() for name in saved} == saved
    else:  # the checkpoint of step 6 is whole; the optimizer state of step 4 stays (resume checks the step)
        assert open(folder / "m.safetensors.optim", "rb").read() == saved["m.safetensors.optim"]
    loaded = load_checkpoint(out)  # whatever is there loads
    assert loaded.training["steps"] in (4, 6)


@pytest.mark.parametrize("damage", ["garbage", "other shapes"])
def test_resume_sets_a_damaged_optimizer_file_aside(tmp_path, capsys, damage):
    """The AdamW moments beside a checkpoint only speed up a resume: a damaged file means fresh
    moments, said in the record, never a traceback."""
    data = write_text(tmp_path / "text.txt")
    out = str(tmp_path / "m.safetensors")
    assert main(["train", "--data", data, "--out", out, *TRAIN_FLAGS]) == 0
    optim = out + ".optim"
    if damage == "garbage":
        with open(optim, "wb") as f:
            f.write(os.urandom(300))
    else:
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file

        with safe_open(optim, framework="pt") as f:
            meta = f.metadata()
        save_file({k: torch.zeros(3) for k in load_file(optim)}, optim, metadata=meta)
    more = [f if f != "4" else "6" for f in TRAIN_FLAGS]
    assert main(["train", "--data", data, "--out", out, *more, "--resume"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    record = load_checkpoint(out).training
    assert record["steps"] == 6 and record["resumed"][-1]["optimizer_restored"] is False
