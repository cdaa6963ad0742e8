"""A tiny checkpoint and a loaded main window, for the window, view, worker and hardening tests."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT

TINY = dict(block_size=64, vocab_size=50257, n_layer=2, n_head=4, n_embd=32)
PROMPT = "The cat sat on the mat. The cat"
WAIT_MS = 60000  # generous for a busy machine; a forward of the tiny model takes milliseconds


def make_checkpoint(path, seed: int = 0, **overrides) -> str:
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{**TINY, **overrides}))
    with torch.no_grad():  # sharper attention than the default init, so patterns differ by head
        for block in model.blocks:
            block.attn.c_attn.weight.mul_(8.0)
    save_checkpoint(model, str(path))
    return str(path)


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory) -> str:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.safetensors")


@pytest.fixture(scope="session")
def other_ckpt(tmp_path_factory) -> str:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt2") / "other.safetensors", seed=1, n_layer=3, n_head=2)


def idle(window) -> bool:
    return not window.worker.busy


def wait_idle(qtbot, window, condition=lambda: True, timeout: int = WAIT_MS) -> None:
    qtbot.waitUntil(lambda: idle(window) and bool(condition()), timeout=timeout)


def idle_and(window, cond=lambda: True):
    """A waitUntil condition: the worker idle and `cond` true."""
    return lambda: not window.worker.busy and cond()


def open_window(qtbot, tmp_path, ckpt: str, prompt: str):
    """A window that loads `ckpt`, then runs `prompt` as a typed prompt (a short debounce)."""
    from PySide6.QtCore import QSettings

    from transformer_viewer.viewer.window.main_window import MainWindow

    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat), debounce_ms=20)
    qtbot.addWidget(w)
    w.show()
    w.load(ckpt, device="cpu")
    qtbot.waitUntil(idle_and(w, lambda: w.state.model_info is not None), timeout=WAIT_MS)
    w.run_prompt(prompt)
    qtbot.waitUntil(idle_and(w, lambda: w.state.trace is not None and w.state.trace.text == prompt), timeout=WAIT_MS)
    return w


def analysis_views(window) -> SimpleNamespace:
    """The analysis views of a window by what they show."""
    v = window.views
    return SimpleNamespace(residual=v["residual"], mlp=v["mlp"], lens=v["logit-lens"],
                           scan=v["scan"], diff=v["diff"], generate=v["continue"])


def new_window(qtbot, tmp_path, ckpt: str | None, prompt: str | None = PROMPT, debounce_ms: int = 30):
    from PySide6.QtCore import QSettings

    from transformer_viewer.viewer.window.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    window = MainWindow(settings=settings, debounce_ms=debounce_ms)
    qtbot.addWidget(window)
    window.show()
    if prompt is not None:
        window.state.set_prompt(prompt)
    if ckpt is not None:
        window.load(ckpt, device="cpu")
        wait_idle(qtbot, window, lambda: window.state.model_info is not None
                  and (prompt is None or window.state.trace is not None))
    return window


@pytest.fixture
def window(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    yield w
    w.close()


def reference_session(ckpt: str, prompt: str = PROMPT):
    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint

    session = Session(load_checkpoint(ckpt, device="cpu"), keep_full=True)
    session.set_prompt(prompt)
    return session


def mask_of(window, *heads) -> np.ndarray:
    info = window.state.model_info
    mask = np.zeros((info.n_layer, info.n_head), dtype=bool)
    for layer, head in heads:
        mask[layer, head] = True
    return mask


@contextlib.contextmanager
def shown_view(qtbot, tmp_path, ckpt: str, view_id: str):
    """A new window on the example prompt with the view `view_id` in front and its first result
    drawn: yields (window, view); the window is closed afterwards."""
    w = new_window(qtbot, tmp_path, ckpt)
    try:
        view = w.views[view_id]
        w.show_view(view_id)
        wait_idle(qtbot, w, lambda: view.result is not None)
        yield w, view
    finally:
        w.close()
