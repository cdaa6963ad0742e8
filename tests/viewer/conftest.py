"""Fixtures of the app-shell tests (tiny checkpoints, a loaded main window); see tests/helpers/window.py."""

import pytest

from tests.helpers.sae_window import sae_folder  # noqa: F401
from tests.helpers.window import other_ckpt, tiny_ckpt, window  # noqa: F401
from transformer_viewer.viewer.gc_guard import collect_on_gui_thread


@pytest.fixture(autouse=True)
def _gc_on_the_gui_thread(qapp):
    """Worker tests start threads without a window: collect garbage on the GUI thread for them
    too, as every window does (viewer/gc_guard.py)."""
    collect_on_gui_thread()
    yield
