"""Help: About (the versions of the app, torch and Qt, and the device the model runs on) and
Keyboard shortcuts (every action of the window that has one, and the keys the views read).

The GUI thread never imports torch: its version is read from the installed package's metadata,
and the device from what the worker reported about the loaded model.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import qVersion
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDialog, QHeaderView, QMessageBox, QTableWidget, QTableWidgetItem, QVBoxLayout

APP = "transformer-viewer"
# Keys the views handle themselves, outside any menu action.
VIEW_KEYS = (
    ("Run the prompt now", "Ctrl+Enter, in the prompt"),
    ("Zoom the head mask's cells", "Ctrl+wheel, over the head mask"),
)


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def about_text(window) -> str:
    """The About box's text, one fact a line."""
    info = window.state.model_info
    if info is None:
        device = "no model loaded"
    else:
        device = f"{info.name} on {info.device}"
    cuda = getattr(window, "cuda_name", "") or ("available" if window.cuda_available else "none found")
    lines = [
        f"{APP} {package_version(APP)}",
        "A native, offline desktop app for seeing inside GPT-style transformers.",
        "",
        f"model: {device}",
        f"CUDA device: {cuda}",
        f"torch {package_version('torch')}",
        f"Qt {qVersion()} (PySide6 {pyside_version})",
        f"pyqtgraph {package_version('pyqtgraph')}, numpy {package_version('numpy')}",
        f"Python {platform.python_version()} on {sys.platform}",
    ]
    return "\n".join(lines)


def _plain(text: str) -> str:
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").replace("\u2026", "").rstrip(". ")


def shortcuts(window) -> list[tuple[str, str]]:
    """(what, keys) for every action of the window with a shortcut, in menu order, then the keys
    the views read; keys as the platform writes them."""
    rows: list[tuple[str, str]] = []
    seen: set[int] = set()

    def add(action: QAction, path: str) -> None:
        if id(action) in seen:
            return
        seen.add(id(action))
        keys = [k.toString(QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts() if not k.isEmpty()]
        if keys and not action.isSeparator():
            rows.append((f"{path}{_plain(action.text())}", ", ".join(keys)))

    def walk(menu, path: str) -> None:
        for action in menu.actions():
            if action.menu() is not None:
                walk(action.menu(), f"{path}{_plain(action.text())} > ")
            else:
                add(action, path)

    for top in window.menuBar().actions():
        if top.menu() is not None:
            walk(top.menu(), f"{_plain(top.text())} > ")
    for action in window.actions():
        add(action, "")
    return rows + list(VIEW_KEYS)


class ShortcutsDialog(QDialog):
    def __init__(self, window):
        super().__init__(window)
        self.setWindowTitle(f"Keyboard shortcuts \u2014 {APP}")
        rows = shortcuts(window)
        self.table = QTableWidget(len(rows), 2, self)
        self.table.setHorizontalHeaderLabels(["action", "keys"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for i, (what, keys) in enumerate(rows):
            self.table.setItem(i, 0, QTableWidgetItem(what))
            self.table.setItem(i, 1, QTableWidgetItem(keys))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        self.resize(560, 420)


class HelpMenu:
    def __init__(self, window, menu):
        self.window, self.menu = window, menu
        self.shortcuts_dialog: ShortcutsDialog | None = None
        self.about_box: QMessageBox | None = None
        self.shortcuts_action = menu.addAction("&Keyboard shortcuts", self.show_shortcuts)
        self.shortcuts_action.setShortcut(QKeySequence.StandardKey.HelpContents)
        menu.addSeparator()
        self.about_action = menu.addAction(f"&About {APP}", self.show_about)
        self.about_action.setMenuRole(QAction.MenuRole.AboutRole)

    def show_shortcuts(self) -> None:
        """Open (not exec: the event loop keeps running) a fresh list of the shortcuts."""
        if self.shortcuts_dialog is not None:
            self.shortcuts_dialog.close()
        self.shortcuts_dialog = ShortcutsDialog(self.window)
        self.shortcuts_dialog.open()

    def show_about(self) -> None:
        if self.about_box is None:
            self.about_box = QMessageBox(QMessageBox.Icon.Information, f"About {APP}", "", QMessageBox.StandardButton.Ok,
                                         self.window)
        self.about_box.setText(about_text(self.window))
        self.about_box.open()


def install(window) -> HelpMenu:
    return HelpMenu(window, window.menuBar().addMenu("&Help"))
