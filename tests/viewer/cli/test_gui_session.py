"""`transformer-viewer --session FILE`: the window opens on the session's checkpoint and prompt; a
refused session file is one line before any window opens."""

from __future__ import annotations

from PySide6.QtGui import QImage

from tests.helpers.cli import cli, error_line
from tests.helpers.sessions import hostile_sessions
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.sessions import registry
from transformer_viewer.model.sessions.checkpoint_part import record_of
from transformer_viewer.model.sessions.prompt_part import PromptRecord
from transformer_viewer.model.sessions.view_parts import SelectionRecord
from transformer_viewer.viewer.cli import gui
from transformer_viewer.viewer.cli.main import gui_parser


def test_the_window_opens_on_the_session(qapp, tiny_ckpt, tmp_path, monkeypatch):
    path = registry.save(str(tmp_path / "s.tvsession"), {
        "checkpoint": record_of(load_checkpoint(tiny_ckpt)), "prompt": PromptRecord("The dog ran to the park"),
        "selection": SelectionRecord(1, 3)})
    seen = []
    original = gui.Screenshot._shoot

    def shoot(self, error=None):
        st = self.window.state
        seen.append((st.model_info.source if st.model_info else None, st.prompt, st.layer, st.head))
        return original(self, error)

    monkeypatch.setattr(gui.Screenshot, "_shoot", shoot)
    out = tmp_path / "shot.png"
    assert gui.run(gui_parser().parse_args(["--session", path, "--screenshot", str(out)])) == 0
    assert not QImage(str(out)).isNull()
    assert seen[-1] == (tiny_ckpt, "The dog ran to the park", 1, 3)
    assert gui.run(gui_parser().parse_args(["--session", path, "--prompt", "A cat", "--screenshot", str(out)])) == 0
    assert seen[-1] == (tiny_ckpt, "A cat", 1, 3)  # the prompt given wins


def test_a_refused_session_is_one_line_before_the_window(tmp_path, capsys):
    data, expect = hostile_sessions()["zip-slip"]
    bad = tmp_path / "bad.tvsession"
    bad.write_bytes(data)
    assert expect in error_line(*cli(capsys, "--session", str(bad), "--screenshot", str(tmp_path / "x.png")))
    assert not (tmp_path / "x.png").exists()
