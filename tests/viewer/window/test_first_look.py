"""The first look: plain empty states instead of placeholder axes, a forward time that says what
it covers, and screenshot runs without Qt's offscreen warnings."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.interventions import ablating
from tests.helpers.window import PROMPT, new_window, wait_idle
from transformer_viewer.viewer.window import empty_states as es
from transformer_viewer.viewer.window.status_bar import StatusBar


def covered(window) -> dict:
    e = window.empty_states
    return {"heatmap": e.shown(window.attention.heatmap), "grid": e.shown(window.head_grid),
            "mask": e.shown(window.mask_grid)}


def test_empty_states_from_launch_to_first_trace(qtbot, tmp_path, tiny_ckpt):
    window = new_window(qtbot, tmp_path, None, prompt=None)
    assert covered(window) == dict.fromkeys(("heatmap", "grid", "mask"), es.NO_MODEL)  # nothing asked for yet
    window.empty_states.set_loading(tiny_ckpt)
    assert covered(window) == dict.fromkeys(("heatmap", "grid", "mask"), "loading tiny.safetensors\u2026")
    window.empty_states.set_loading(None)
    assert covered(window)["heatmap"] == "loading the bundled model\u2026"
    label = window.empty_states.states[id(window.attention.heatmap)]
    assert label.isVisible() and label.geometry() == window.attention.heatmap.rect()  # covers the axes

    window.load(tiny_ckpt, device="cpu")
    wait_idle(qtbot, window, lambda: window.state.model_info is not None)
    assert covered(window) == {"heatmap": es.TYPE_A_PROMPT, "grid": es.TYPE_A_PROMPT, "mask": None}
    assert all(window.empty_states.shown(window.views[t]) == es.TYPE_A_PROMPT for t in es.TRACE_TABS)

    window.run_prompt(PROMPT)
    wait_idle(qtbot, window, lambda: window.state.trace is not None)
    assert covered(window) == {"heatmap": None, "grid": None, "mask": None}
    assert all(window.empty_states.shown(window.views[t]) is None for t in es.TRACE_TABS)
    window.close()


def test_a_cancelled_first_run_says_how_to_run_it_again(qtbot, tmp_path, tiny_ckpt):
    from transformer_viewer.viewer.worker.requests import Failure, PredictRequest, TraceRequest

    window = new_window(qtbot, tmp_path, None, prompt=None)
    window.load(tiny_ckpt, device="cpu")
    wait_idle(qtbot, window, lambda: window.state.model_info is not None)
    window.state.prompt = PROMPT  # typed, and its first run cancelled before any trace came back
    window.worker.failed.emit(Failure(PredictRequest(text=PROMPT), "cancelled", cancelled=True))
    assert window.empty_states.message() == es.RUNNING  # a cancelled prediction is not the run stopping
    window.worker.failed.emit(Failure(TraceRequest(text=PROMPT), "cancelled", cancelled=True))
    assert covered(window) == {"heatmap": es.STOPPED, "grid": es.STOPPED, "mask": None}

    window.run_prompt(PROMPT)  # Ctrl+Enter: the same prompt again
    assert covered(window)["heatmap"] == es.RUNNING
    wait_idle(qtbot, window, lambda: window.state.trace is not None)
    assert covered(window) == {"heatmap": None, "grid": None, "mask": None}
    window.close()


def test_a_failed_first_load_says_no_model(qtbot, tmp_path):
    window = new_window(qtbot, tmp_path, None, prompt=None)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"junk")
    window.load(str(bad), device="cpu")
    wait_idle(qtbot, window, lambda: window.last_error is not None)
    assert covered(window)["heatmap"] == es.NO_MODEL
    window.close()


def test_a_cancelled_first_load_says_no_model(qtbot, tmp_path, tiny_ckpt):
    from transformer_viewer.viewer.worker.requests import Failure, LoadRequest

    window = new_window(qtbot, tmp_path, None, prompt=None)
    window.empty_states.set_loading(tiny_ckpt)
    window.worker.failed.emit(Failure(LoadRequest(path=tiny_ckpt), "cancelled", cancelled=True))
    assert covered(window) == dict.fromkeys(("heatmap", "grid", "mask"), es.NO_MODEL)
    window.load(tiny_ckpt, device="cpu")  # asked again: it says so, then loads
    assert covered(window)["heatmap"] == "loading tiny.safetensors\u2026"
    wait_idle(qtbot, window, lambda: window.state.model_info is not None)
    assert covered(window)["heatmap"] == es.TYPE_A_PROMPT
    window.close()


def test_forward_time_says_what_it_covers(qtbot):
    from PySide6.QtWidgets import QMainWindow

    host = QMainWindow()
    qtbot.addWidget(host)
    status = StatusBar(host)
    status.show_forward(136.0, first_layer=1, n_layer=4, compute_ms=12.5)
    assert status.forward_label.text() == "forward 12.5 ms, 136 ms on the clock (layer 0 cached)"
    assert "redrew" in status.forward_label.toolTip()
    status.show_forward(50.0, first_layer=0, n_layer=4, compute_ms=47.0)  # no wait worth naming
    assert status.forward_label.text() == "forward 50.0 ms"


def test_trace_result_carries_the_worker_threads_own_time(tiny_ckpt):
    import numpy as np

    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.viewer.worker.handlers import WorkerSession, handle_trace
    from transformer_viewer.viewer.worker.requests import TraceRequest

    session = WorkerSession(load_checkpoint(tiny_ckpt, device="cpu"))
    result = handle_trace(session, TraceRequest(text=PROMPT, intervention=ablating(np.zeros((2, 4), bool)),
                                                position=None, top_k=5), None, lambda: False)
    assert result.compute_ms is not None and 0 < result.compute_ms


def test_screenshot_run_prints_no_qt_warnings(tiny_ckpt, tmp_path):
    out = tmp_path / "shot.png"
    done = subprocess.run([sys.executable, "-m", "transformer_viewer.viewer.cli.main", tiny_ckpt, "--device", "cpu",
                           "--prompt", PROMPT, "--screenshot", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "propagateSizeHints" not in done.stderr and done.stderr.strip() == ""
    assert out.exists()
