"""The Qt application the commands that draw figures (export, patch, routes) draw in, without a
window, and the disposal of a widget drawn there."""

from __future__ import annotations

import os
import sys


def offscreen_app():
    """The QApplication exports draw in (made once, on the offscreen platform)."""
    # Exports never show a window; offscreen also works where there is no display at all.
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6 import QtCore, QtWidgets

    app = QtWidgets.QApplication.instance()
    if app is None:
        QtCore.qInstallMessageHandler(_quiet_offscreen)
        app = QtWidgets.QApplication(["transformer-viewer"])
    return app


def _quiet_offscreen(mode, context, message: str) -> None:
    # The offscreen platform warns about window size hints it cannot honour; nothing to act on.
    if "propagateSizeHints" in message:
        return
    print(message, file=sys.stderr)


def dispose_widget(widget, app) -> None:
    # Delete the C++ widget now, while the QApplication is alive: left to interpreter shutdown,
    # pyqtgraph's scene can outlive the app and crash on exit.
    import shiboken6

    widget.close()
    if shiboken6.isValid(widget):
        shiboken6.delete(widget)
    app.processEvents()
