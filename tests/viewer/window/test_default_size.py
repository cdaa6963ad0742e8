"""The window at its default size: every tab's title shows, the head scan's fields are wide
enough to read, and Help has About (versions, device) and the keyboard shortcuts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib import metadata

from PySide6.QtCore import qVersion
from PySide6.QtGui import QAction, QKeySequence

from transformer_viewer.viewer.window import help_menu
from transformer_viewer.viewer.window.main_window import DEFAULT_SIZE


def test_the_default_size_shows_every_tab(qtbot, window):
    window.resize(*DEFAULT_SIZE)
    window.apply_default_sizes()
    bar = window.tabs.tabBar()
    qtbot.waitUntil(lambda: bar.width() >= bar.sizeHint().width())
    assert bar.count() >= 7
    assert all(0 <= bar.tabRect(i).left() and bar.tabRect(i).right() < bar.width() for i in range(bar.count()))
    assert window.docks["next-token"].width() >= 300  # the next-token table keeps its columns


def test_the_scan_fields_show_their_text(qtbot, window):
    window.resize(*DEFAULT_SIZE)
    window.apply_default_sizes()
    window.show_view("scan")
    scan = window.views["scan"]
    qtbot.waitUntil(scan.isVisible)
    for edit, text in ((scan.target_edit, "' Paris'"), (scan.distractor_edit, "' London'")):
        edit.setText(text)
        needed = edit.fontMetrics().horizontalAdvance(text) + 8  # the text and the frame
        assert edit.width() >= needed, (edit.width(), needed)
        assert edit.width() >= edit.fontMetrics().horizontalAdvance(edit.placeholderText()) + 8


def test_about_names_the_versions_and_the_device(window):
    text = help_menu.about_text(window)
    assert f"transformer-viewer {metadata.version('transformer-viewer')}" in text
    assert f"torch {metadata.version('torch')}" in text and f"Qt {qVersion()}" in text
    info = window.state.model_info
    assert f"model: {info.name} on {info.device}" in text and info.device == "cpu"
    assert "CUDA device: " in text
    menus = [a.text().replace("&", "") for a in window.menuBar().actions()]
    assert menus[-1] == "Help"
    window.actions_.help.about_action.trigger()
    box = window.actions_.help.about_box
    assert box.isVisible() and box.text() == text
    box.close()


def test_the_shortcuts_list_every_action_with_keys(window):
    rows = dict(help_menu.shortcuts(window))
    native = QKeySequence.SequenceFormat.NativeText
    assert rows["File > Open checkpoint"] == QKeySequence(QKeySequence.StandardKey.Open).toString(native)
    assert rows["View > Select > Next head"] == "Right"
    assert rows["View > Select > Previous layer"] == "Up, PgUp"
    assert rows["View > Reset heatmap zoom"] == QKeySequence("Ctrl+0").toString(native)
    assert "Ctrl+Enter" in rows["Run the prompt now"]
    keyed = [a.text().replace("&", "").rstrip("\u2026") for a in window.findChildren(QAction) if not a.shortcut().isEmpty()]
    assert keyed and all(any(what.endswith(text) for what in rows) for text in keyed)  # each one listed
    window.actions_.help.shortcuts_action.trigger()
    dialog = window.actions_.help.shortcuts_dialog
    assert dialog.isVisible() and dialog.table.rowCount() == len(rows)
    dialog.close()


SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    from transformer_viewer.viewer.worker.client import WorkerClient

    class NoWorkClient(WorkerClient):
        def submit(self, request, **_callbacks):
            return request

    from transformer_viewer.viewer.window.main_window import MainWindow
    from transformer_viewer.viewer.window import help_menu
    w = MainWindow(worker=NoWorkClient())
    w.show()
    print("ABOUT", help_menu.about_text(w).replace(chr(10), " | "))
    help_menu.shortcuts(w)
    w.close()
    print("TORCH", "torch" in sys.modules)
""")


def test_about_reads_torchs_version_without_importing_it():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"torch {metadata.version('torch')}" in out.stdout and "model: no model loaded" in out.stdout
    assert "TORCH False" in out.stdout
