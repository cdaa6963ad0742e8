"""`transformer-viewer --head L.H`: the head the window shows once the model has loaded."""

from __future__ import annotations

import pytest

from tests.helpers.window import new_window, wait_idle
from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli import gui
from transformer_viewer.viewer.cli.main import gui_parser


@pytest.mark.parametrize("text, expected", [("0.3", (0, 3)), (" 12.0 ", (12, 0))])
def test_a_head_is_layer_dot_head(text, expected):
    assert gui.parse_head(text) == expected


@pytest.mark.parametrize("text", ["3", "0.3.1", "-1.2", "a.b", "1,2", ""])
def test_anything_else_is_refused(text):
    with pytest.raises(ModelError, match="give a head as LAYER.HEAD"):
        gui.parse_head(text)


def test_the_head_is_selected_when_the_model_arrives(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, None)
    errors: list[str] = []
    gui.select_head_when_loaded(w, 1, 2, errors)
    assert (w.state.layer, w.state.head) == (0, 0)  # no model yet: nothing to select
    w.load(tiny_ckpt, device="cpu")
    wait_idle(qtbot, w, lambda: w.state.trace is not None)
    assert (w.state.layer, w.state.head) == (1, 2) and errors == []
    w.close()


def test_a_head_the_model_lacks_is_an_error_and_the_selection_stays(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, None)
    errors: list[str] = []
    gui.select_head_when_loaded(w, 2, 0, errors)  # the tiny model has layers 0 and 1
    w.load(tiny_ckpt, device="cpu")
    wait_idle(qtbot, w, lambda: w.state.trace is not None)
    assert errors == ["--head 2.0: this model's heads run from 0.0 to 1.3"]
    assert w.last_error == errors[0] and (w.state.layer, w.state.head) == (0, 0)
    w.close()


def test_a_screenshot_with_a_missing_head_fails_with_that_line(qapp, tiny_ckpt, tmp_path, capsys):
    out = tmp_path / "shot.png"
    args = gui_parser().parse_args([tiny_ckpt, "--device", "cpu", "--head", "0.9", "--screenshot", str(out)])
    assert gui.run(args) == 2
    assert capsys.readouterr().err.strip() == "error: --head 0.9: this model's heads run from 0.0 to 1.3"
