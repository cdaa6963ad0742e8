"""A model under a folder whose name is not UTF-8 (Linux names are bytes) in the window: given
as a path (the command line) it opens; the name Qt's file dialogs hand back for it, with the
undecodable bytes replaced by U+FFFD, names no file, and the window says so in one line and keeps
the model it had."""

from __future__ import annotations

import os
import sys

import pytest

from tests.helpers.hardening import Dialogs, new_window, one_line, wait_idle
from tests.helpers.window import make_checkpoint


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="only Linux takes any bytes as a name")
def test_a_name_that_is_not_utf8_opens_and_its_dialog_form_is_explained(qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    dialogs = Dialogs(monkeypatch)
    folder = os.path.join(os.fsencode(str(tmp_path)), b"mod\xff")
    os.mkdir(folder)
    ckpt = make_checkpoint(os.fsdecode(os.path.join(folder, b"tiny.safetensors")))
    window = new_window(qtbot, tmp_path, ckpt)
    try:
        assert window.state.model_info is not None and window.state.trace is not None and not dialogs.shown
        as_qt_decodes = os.fsencode(ckpt).decode("utf-8", errors="replace")  # what a QString holds
        monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (as_qt_decodes, "")))
        window.actions_.open_dialog()
        wait_idle(qtbot, window, lambda: bool(dialogs.shown))
        assert len(dialogs.shown) == 1 and one_line(dialogs.last)
        assert "not UTF-8" in dialogs.last and "give its path on the command line" in dialogs.last
        assert window.state.model_info.name == "tiny.safetensors"  # the model it had is kept
    finally:
        window.close()
