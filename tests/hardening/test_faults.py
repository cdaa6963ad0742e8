"""Faults from outside: CUDA asked for where there is none, a capture too large for the memory
budget, exports to a full or read-only disk, and the worker raising in the middle of a forward.
Each is one clear line, and the app keeps working afterwards."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from tests.helpers.handlers import swap_handler
from tests.helpers.hardening import new_window, one_line, wait_idle
from transformer_viewer.model import device as device_module
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.errors import CaptureTooLargeError, DeviceError
from transformer_viewer.model.files import atomic_write
from transformer_viewer.viewer.cli.main import main
from transformer_viewer.viewer.window.actions import export
from transformer_viewer.viewer.worker import handlers
from transformer_viewer.viewer.worker.requests import TraceRequest

NO_CUDA = "CUDA was requested but no CUDA device is available here"
WORDS = "one two three four five six seven eight nine ten".split()
TEXT_20, TEXT_40 = " ".join(WORDS * 2), " ".join(WORDS * 4)  # 20 and 40 tokens


# -- CUDA requested, none present --------------------------------------------------------------
def test_cuda_without_a_gpu_is_a_clear_error_headless(no_cuda, tiny_ckpt, capsys):
    with pytest.raises(DeviceError) as info:
        device_module.resolve_device("cuda")
    assert one_line(str(info.value)) and NO_CUDA in str(info.value) and "--device cpu" in str(info.value)
    device, warning = device_module.resolve_device_with_fallback("cuda")
    assert device.type == "cpu" and NO_CUDA in warning and "running on CPU instead" in warning
    for argv in (["predict", "--checkpoint", tiny_ckpt, "--prompt", "hi", "--device", "cuda"],
                 ["info", tiny_ckpt, "--device", "cuda"]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and "Traceback" not in err and err.strip().splitlines() == [f"error: {info.value}"]


def test_cuda_without_a_gpu_falls_back_to_cpu_in_the_app(qtbot, tmp_path, tiny_ckpt, no_cuda, dialogs):
    window = new_window(qtbot, tmp_path, None)
    st = window.state
    window.load(tiny_ckpt, device="cuda")  # as `transformer-viewer CKPT --device cuda` does
    wait_idle(qtbot, window, lambda: st.model_info is not None and st.trace is not None)
    assert st.model_info.device == "cpu"
    assert NO_CUDA in window.status.currentMessage() and "running on CPU instead" in window.status.currentMessage()
    assert window.status.device_label.text() == "cpu"
    assert window.actions_.cpu_action.isChecked() and not window.actions_.cuda_action.isEnabled()
    assert not dialogs.shown
    # Asking to move the loaded model to CUDA: a dialog, and it stays on the CPU.
    window.set_device("cuda")
    wait_idle(qtbot, window, lambda: bool(dialogs.shown))
    assert NO_CUDA in dialogs.last and st.model_info.device == "cpu" and window.actions_.cpu_action.isChecked()
    window.run_prompt("still running on the CPU")
    wait_idle(qtbot, window, lambda: st.trace.text == "still running on the CPU")
    window.close()


# -- capture larger than the memory budget -----------------------------------------------------
@pytest.fixture(scope="module")
def loaded(tiny_ckpt):
    return load_checkpoint(tiny_ckpt, device="cpu")


def test_capture_too_large_says_which_length_fits(loaded):
    probe = Session(loaded)
    budget = probe.estimate_bytes(20)
    session = Session(loaded, memory_budget=budget)
    session.set_prompt(TEXT_40)
    assert len(session.tokens.ids) == 40
    with pytest.raises(CaptureTooLargeError) as info:
        session.run()
    message = str(info.value)
    assert one_line(message) and "capturing 40 tokens" in message and "20 tokens or fewer" in message
    with pytest.raises(CaptureTooLargeError):
        session.predict()  # its first call fills the cache with a capture: same guard
    session.set_prompt(TEXT_20)  # the length it named
    assert session.run().n_tokens == 20


def test_a_budget_that_fits_nothing_says_so(loaded):
    session = Session(loaded, memory_budget=100)  # bytes: not even one token
    session.set_prompt("hello")
    with pytest.raises(CaptureTooLargeError) as info:
        session.run()
    message = str(info.value)
    assert one_line(message) and "or fewer" not in message and "not even one token" in message
    assert "100 bytes" in message  # sizes in units that make sense, not "0 MiB"


def test_the_app_reads_the_budget_from_the_environment(monkeypatch):
    monkeypatch.delenv(handlers.MEMORY_BUDGET_ENV, raising=False)
    assert handlers.memory_budget() == (handlers.DEFAULT_MEMORY_BUDGET, None)
    monkeypatch.setenv(handlers.MEMORY_BUDGET_ENV, "1.5")
    assert handlers.memory_budget() == (int(1.5 * 2**20), None)
    for bad in ("lots", "-3", "0", "nan", "inf"):
        monkeypatch.setenv(handlers.MEMORY_BUDGET_ENV, bad)
        budget, warning = handlers.memory_budget()
        assert budget == handlers.DEFAULT_MEMORY_BUDGET and one_line(warning) and handlers.MEMORY_BUDGET_ENV in warning


def test_the_app_shows_a_capture_too_large_and_stays_usable(qtbot, tmp_path, tiny_ckpt, monkeypatch, dialogs, loaded):
    budget = Session(loaded).estimate_bytes(20)  # the app's session keeps overviews and summaries
    monkeypatch.setenv(handlers.MEMORY_BUDGET_ENV, str(budget / 2**20))
    window = new_window(qtbot, tmp_path, tiny_ckpt, prompt="short prompt")
    st = window.state
    good = st.trace
    window.run_prompt(TEXT_40)
    wait_idle(qtbot, window, lambda: window.last_error is not None)
    assert "20 tokens or fewer" in window.last_error and "capturing 40 tokens" in window.last_error
    assert window.prompt_editor.notice.text() == window.last_error and window.prompt_editor.notice.isVisibleTo(window)
    assert st.trace is good  # the last good trace stays on screen
    window.run_prompt(TEXT_20)
    wait_idle(qtbot, window, lambda: st.trace is not good and st.trace.n_tokens == 20)
    assert not window.prompt_editor.notice.isVisibleTo(window)
    assert not dialogs.shown
    window.close()


# -- export to a full or read-only disk ---------------------------------------------------------
def leftovers(folder) -> list[str]:
    return sorted(os.listdir(folder))


def disk_full(*_a, **_kw):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def read_only(*_a, **_kw):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS))


def denied(*_a, **_kw):
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))


@pytest.fixture
def exported_window(qtbot, tmp_path, tiny_ckpt, dialogs):
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    yield window
    window.close()


REAL_WRITE = os.write


def full_after_half(fd, data):
    """What a full disk does to os.write: part of each request is taken, then ENOSPC."""
    n = len(data) // 2
    if n:
        return REAL_WRITE(fd, bytes(data[:n]))
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def cannot_encode(*_a):
    return False


EXPORT_FAULTS = [
    # (name, what, file name, attribute to break, replacement, expected fragment)
    ("npy on a full disk", "heatmap", "m.npy", (os, "fsync"), disk_full, "no space left on device"),
    ("csv on a full disk", "heatmap", "m.csv", (os, "fsync"), disk_full, "no space left on device"),
    ("png on a full disk", "heatmap", "m.png", (os, "write"), full_after_half, "no space left on device"),
    ("grid png on a full disk", "grid", "g.png", (os, "write"), full_after_half, "no space left on device"),
    ("svg on a full disk", "heatmap", "m.svg", (os, "write"), full_after_half, "no space left on device"),
    ("grid svg on a full disk", "grid", "g.svg", (os, "write"), full_after_half, "no space left on device"),
    ("png Qt cannot encode", "heatmap", "e.png", ("QImage", "save"), cannot_encode, "could not encode"),
    ("svg on a read-only disk", "heatmap", "m.svg", (os, "replace"), read_only, "read-only file system"),
    ("png on a read-only disk", "heatmap", "r.png", (os, "replace"), read_only, "read-only file system"),
    ("npy where temp files are denied", "heatmap", "d.npy", (atomic_write.tempfile, "mkstemp"), denied,
     "permission denied"),
    ("folder not writable", "heatmap", "w.csv", (os, "access"), lambda *a: False, "is not writable"),
]


@pytest.mark.parametrize("name,what,filename,target,replacement,expected", EXPORT_FAULTS,
                         ids=[f[0] for f in EXPORT_FAULTS])
def test_export_to_a_full_or_read_only_disk(exported_window, tmp_path, dialogs, monkeypatch,
                                            name, what, filename, target, replacement, expected):
    from PySide6.QtGui import QImage

    window = exported_window
    out = tmp_path / "out"
    out.mkdir()
    path = str(out / filename)
    owner, attr = target
    owner = QImage if owner == "QImage" else owner
    monkeypatch.setattr(owner, attr, replacement)
    assert export(window, what, path) is None
    monkeypatch.undo()
    assert dialogs.last is not None and one_line(dialogs.last) and expected in dialogs.last.lower(), dialogs.last
    assert leftovers(out) == [], "a partial or temporary file was left behind"
    # The same export works once the disk is fine again, and the window still answers.
    assert export(window, what, path) == path and os.path.getsize(path) > 0
    assert leftovers(out) == [filename]


# -- the worker raising mid-forward ---------------------------------------------------------------
@pytest.mark.parametrize("error,expected", [
    (RuntimeError("boom in block 1"), "internal error (RuntimeError: boom in block 1); the previous state is kept"),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "out of memory; use a shorter prompt"),
    (MemoryError(), "out of memory; use a shorter prompt"),
])
def test_the_worker_raising_mid_forward(qtbot, tmp_path, tiny_ckpt, monkeypatch, dialogs, error, expected):
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    st = window.state
    good = st.trace
    real = GPT.run_blocks
    calls = {"n": 0}

    def fail_once(self, x, start=0, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise error
        return real(self, x, start, *a, **kw)

    monkeypatch.setattr(GPT, "run_blocks", fail_once)
    window.run_prompt("the forward that fails")
    wait_idle(qtbot, window, lambda: window.last_error is not None)
    assert window.last_error.startswith(expected) and one_line(window.last_error)
    assert window.prompt_editor.notice.text() == window.last_error
    assert st.trace is good and st.model_info is not None
    window.run_prompt("the forward after it")
    wait_idle(qtbot, window, lambda: st.trace is not good and st.trace.text == "the forward after it")
    assert calls["n"] >= 2 and not dialogs.shown
    # Masking still works on the same session (its caches survived the failure).
    mask = np.zeros_like(st.mask)
    mask[1, 0] = True
    st.set_mask(mask)
    wait_idle(qtbot, window, lambda: st.trace.mask[1, 0])
    window.close()


def test_a_handler_raising_once_then_working(qtbot, tmp_path, tiny_ckpt, monkeypatch, dialogs):
    """A bug in a handler (not the model): one line in the notice, the next request works."""
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    st = window.state
    real = handlers.handle_trace
    calls = {"n": 0}

    def broken(*args):
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("layer 7")
        return real(*args)

    swap_handler(monkeypatch, TraceRequest, broken)
    window.run_prompt("first try")
    wait_idle(qtbot, window, lambda: window.last_error is not None)
    assert window.last_error == "internal error (KeyError: 'layer 7'); the previous state is kept"
    window.run_prompt("second try")
    wait_idle(qtbot, window, lambda: st.trace.text == "second try")
    window.close()


def test_loading_that_runs_out_of_memory_keeps_the_model(qtbot, tmp_path, tiny_ckpt, monkeypatch, dialogs):
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    before = window.state.model_info

    def oom(*_a, **_kw):
        raise MemoryError()

    monkeypatch.setattr(handlers, "load_checkpoint", oom)
    window.load(tiny_ckpt)
    wait_idle(qtbot, window, lambda: bool(dialogs.shown))
    assert dialogs.last.startswith("out of memory") and window.state.model_info == before
    monkeypatch.undo()
    window.run_prompt("after the failed load")
    wait_idle(qtbot, window, lambda: window.state.trace.text == "after the failed load")
    window.close()
