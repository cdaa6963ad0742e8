"""The window's full-pattern export writes an ordinary file: a new one gets 0666 less the umask
(not mkstemp's 0600), a replaced one keeps its own mode; as .npy or as exact .csv."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from tests.helpers.window import PROMPT, new_window, wait_idle
from transformer_viewer.model.capture.on_demand import head_pattern
from transformer_viewer.viewer.export import read_csv_matrix
from transformer_viewer.viewer.window.pattern_export import export_pattern


@pytest.fixture
def umask():
    def set_to(mask: int) -> None:
        os.umask(mask)
    old = os.umask(0o022)
    yield set_to
    os.umask(old)


def export_and_wait(qtbot, window, path) -> None:
    handle = export_pattern(window, str(path))
    assert handle is not None, window.last_error
    wait_idle(qtbot, window, lambda: handle.done)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_file_gets_the_umasks_mode_and_a_replaced_one_keeps_its_own(qtbot, tmp_path, tiny_ckpt, umask):
    window = new_window(qtbot, tmp_path, tiny_ckpt, prompt=PROMPT)
    for mask in (0o022, 0o027):
        umask(mask)
        out = tmp_path / f"new-{mask:o}.npy"
        export_and_wait(qtbot, window, out)
        assert mode(out) == 0o666 & ~mask
    umask(0o022)
    kept = tmp_path / "kept.npy"
    kept.write_bytes(b"the user's old file")
    os.chmod(kept, 0o640)
    export_and_wait(qtbot, window, kept)
    assert mode(kept) == 0o640 and np.load(kept).shape == (window.state.trace.n_tokens,) * 2
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".part")]
    window.close()


def test_the_full_pattern_exports_as_exact_csv(qtbot, tmp_path, tiny_ckpt):
    window = new_window(qtbot, tmp_path, tiny_ckpt, prompt=PROMPT)
    st = window.state
    st.set_selection(layer=1, head=2)
    export_and_wait(qtbot, window, tmp_path / "head.csv")
    values, rows, cols = read_csv_matrix(tmp_path / "head.csv")
    assert tuple(rows) == tuple(cols) == tuple(st.trace.labels)
    exact = head_pattern(window.worker.worker.session, st.trace, 1, 2)  # the worker is idle
    np.testing.assert_array_equal(values.astype(np.float32), exact)
    window.close()


def test_the_export_dialogs_theme_reaches_the_figure(qtbot, tmp_path, tiny_ckpt):
    from PySide6 import QtGui

    from transformer_viewer.viewer.window import actions

    window = new_window(qtbot, tmp_path, tiny_ckpt, prompt=PROMPT)
    for theme, page in (("light", (255, 255, 255)), ("dark", (0, 0, 0))):
        out = actions.export(window, "heatmap", str(tmp_path / f"{theme}.png"), theme=theme)
        assert out is not None, window.last_error
        assert QtGui.QColor(QtGui.QImage(out).pixel(1, 1)).getRgb()[:3] == page
    window.close()
