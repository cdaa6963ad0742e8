"""Helpers of the hardening tests: the tiny model, a loaded main window, dialogs that never block,
and hooks that turn any uncaught exception (GUI or worker thread) into a test failure."""

from __future__ import annotations

import sys
import threading

import torch

from tests.helpers.window import new_window, wait_idle  # noqa: F401 - the hardening tests import them from here
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT

TINY = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=64)
PROMPT = "The cat sat on the mat. The cat"


def save_tiny(path, seed: int = 0, config: GPTConfig = TINY) -> str:
    torch.manual_seed(seed)
    model = GPT(config).eval()
    with torch.no_grad():  # peakier attention than the init gives, so heads differ
        for block in model.blocks:
            block.attn.c_attn.weight.mul_(8.0)
    save_checkpoint(model, str(path))
    return str(path)


def one_line(message: str) -> bool:
    return bool(message) and "\n" not in message and "\r" not in message and "Traceback" not in message


# -- GUI -------------------------------------------------------------------------------------
class Dialogs:
    """Every message box the app opens, recorded instead of shown (none can block a test)."""

    def __init__(self, monkeypatch):
        from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

        self.shown: list[str] = []

        def record_open(box, *_a):
            self.shown.append(box.text())

        def record_static(_parent, _title, text, *_a, **_kw):
            self.shown.append(text)
            return QMessageBox.Ok

        monkeypatch.setattr(QMessageBox, "open", record_open)
        monkeypatch.setattr(QMessageBox, "exec", lambda box, *_a: record_open(box) or QMessageBox.Ok)
        for name in ("warning", "critical", "information", "question"):
            monkeypatch.setattr(QMessageBox, name, staticmethod(record_static))
        # File dialogs would wait for a person: answer "cancelled".
        monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: ("", "")))
        monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: ("", "")))
        monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(lambda *a, **k: ""))
        monkeypatch.setattr(QInputDialog, "getDouble", staticmethod(lambda *a, **k: (1.0, False)))
        monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: ("", False)))
        from transformer_viewer.viewer.views.export_options import ExportOptionsDialog

        monkeypatch.setattr(ExportOptionsDialog, "exec", lambda *_a: 0)  # the figure options: cancelled

    @property
    def last(self) -> str | None:
        return self.shown[-1] if self.shown else None


class UncaughtExceptions:
    """Installs sys.excepthook and threading.excepthook that record instead of printing; the test
    asserts `errors` is empty. Qt calls sys.excepthook for exceptions escaping slots and events."""

    def __init__(self):
        self.errors: list[str] = []
        self._old_sys = sys.excepthook
        self._old_threading = threading.excepthook

    def __enter__(self):
        def hook(exc_type, exc, tb):
            import traceback

            self.errors.append("".join(traceback.format_exception(exc_type, exc, tb)))

        sys.excepthook = hook
        threading.excepthook = lambda args: hook(args.exc_type, args.exc_value, args.exc_traceback)
        return self

    def __exit__(self, *exc):
        sys.excepthook = self._old_sys
        threading.excepthook = self._old_threading
        return False
