"""Fixtures of the app-shell tests (tiny checkpoints, a loaded main window); see shell_common.py."""

from tests.viewer.shell_common import other_ckpt, tiny_ckpt, window  # noqa: F401
