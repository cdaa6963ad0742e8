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


def test_quiet_selection_of_a_missing_head_shows_no_error(qtbot, tmp_path, tiny_ckpt):
    """The default head (the first example's, written for the bundled model) is skipped silently
    on a model that lacks it."""
    w = new_window(qtbot, tmp_path, None)
    errors: list[str] = []
    gui.select_head_when_loaded(w, 2, 0, errors, quiet=True)
    w.load(tiny_ckpt, device="cpu")
    wait_idle(qtbot, w, lambda: w.state.trace is not None)
    assert errors and w.last_error is None and (w.state.layer, w.state.head) == (0, 0)
    w.close()


def test_an_example_selects_its_head_on_the_bundled_model_only(qtbot, tmp_path, tiny_ckpt, monkeypatch):
    from transformer_viewer.model.capture.prompts import ExamplePrompt
    from transformer_viewer.viewer.window import actions

    example = ExamplePrompt(title="t", text="And the king went up into the house", shows="s", head=(1, 2))
    w = new_window(qtbot, tmp_path, None)
    w.load(tiny_ckpt, device="cpu")
    wait_idle(qtbot, w, lambda: w.state.trace is not None)
    w.actions_._run_example(example)  # another model: the prompt runs, the head stays
    wait_idle(qtbot, w, lambda: w.state.trace is not None and w.state.trace.text == example.text)
    assert (w.state.layer, w.state.head) == (0, 0)
    monkeypatch.setattr("transformer_viewer.model.checkpoints.bundled.bundled_checkpoint_path", lambda: tiny_ckpt)
    w.actions_._run_example(example)  # the examples' own model: its head is shown
    assert (w.state.layer, w.state.head) == (1, 2)
    assert actions.default_head() == actions.example_prompts()[0].head
    w.close()


class ShotOfTheHead(gui.Screenshot):
    """The launch's own screenshot, noting which head the window shows when it is taken."""

    seen: list[tuple[int, int]] = []

    def _shoot(self, error=None):
        if not self._done:
            ShotOfTheHead.seen.append((self.window.state.layer, self.window.state.head))
        super()._shoot(error)


@pytest.mark.parametrize("argv, expected", [
    (["--prompt", "And God said"], "example"),  # a prompt of the user's own
    ([], "example"),  # the first example's own prompt
    (["--head", "1.3", "--prompt", "To be"], (1, 3)),  # a head asked for wins
    (["{tiny}", "--prompt", "To be"], (0, 0)),  # another model: its first head
])
def test_the_window_opens_on_the_bundled_models_named_head_whatever_the_prompt(
        qapp, tiny_ckpt, tmp_path, monkeypatch, argv, expected):
    from transformer_viewer.viewer.window.actions import default_head

    monkeypatch.setattr(gui, "Screenshot", ShotOfTheHead)
    ShotOfTheHead.seen = []
    argv = [a.replace("{tiny}", tiny_ckpt) for a in argv]
    args = gui_parser().parse_args([*argv, "--device", "cpu", "--screenshot", str(tmp_path / "shot.png")])
    assert gui.run(args) == 0
    assert default_head() == (2, 2)  # the bundled model's previous-token head, as its card says
    assert ShotOfTheHead.seen == [default_head() if expected == "example" else expected]
