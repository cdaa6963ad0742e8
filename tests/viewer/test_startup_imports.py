"""The window is built without torch on the GUI thread: only the worker imports it, so the
window shows while torch loads. Checked in a fresh process (this one has torch already)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    from transformer_viewer.viewer.worker.client import WorkerClient

    class NoWorkClient(WorkerClient):  # the thread runs, but nothing reaches it
        def submit(self, request, **_callbacks):
            return request

    from transformer_viewer.viewer.window.main_window import MainWindow
    from transformer_viewer.viewer.window.actions import default_prompt
    w = MainWindow(worker=NoWorkClient())
    w.state.set_prompt(default_prompt())
    w.show()
    for _ in range(5):
        app.processEvents()
    w.close()
    heavy = sorted(m for m in ("torch", "transformer_viewer.model.capture.session") if m in sys.modules)
    print("HEAVY", heavy)
""")


def test_the_gui_thread_never_imports_torch():
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout, out.stdout


def test_the_worker_side_imports_no_qt():
    code = ("import sys, transformer_viewer.viewer.worker.handlers, transformer_viewer.viewer.worker.lens, "
            "transformer_viewer.viewer.worker.scan, transformer_viewer.viewer.worker.generate, "
            "transformer_viewer.viewer.worker.inline; print('QT', 'PySide6' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "QT False" in out.stdout


def test_headless_commands_import_no_qt():
    code = "import sys, transformer_viewer.viewer, transformer_viewer.viewer.cli.main, transformer_viewer.viewer.worker.requests; " \
           "print('QT', 'PySide6' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "QT False" in out.stdout
