"""Triggers for the first-run messages: the launch check for Qt's system libraries, the command
line's argument checks, text files that are not text."""

from __future__ import annotations

from tests.hardening.message_case import Case, raised
from transformer_viewer.viewer import platform_check


def missing_xcb(ctx):
    return raised(lambda: platform_check.check_qt_platform(
        {"QT_QPA_PLATFORM": "xcb"}, "linux", lambda soname: soname != "libxcb-cursor.so.0"))


CASES = [
    Case("launch without Qt's xcb libraries", missing_xcb, "sudo apt install libxcb-cursor0"),
]
