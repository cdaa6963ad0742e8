"""What the README promises a new user in the first hour, read from the README itself: its first
command opens the window on the head it names, and the test command says how long it takes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from transformer_viewer.viewer.cli import gui
from transformer_viewer.viewer.cli.main import gui_parser

README = Path(__file__).resolve().parents[3] / "README.md"


def code_blocks() -> list[str]:
    return re.findall(r"```\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def first_command() -> list[str]:
    """The arguments of the README's first `transformer-viewer` command (after `pip install .`)."""
    line = code_blocks()[0].strip()
    assert line.startswith("pip install . && transformer-viewer "), line
    return shlex.split(line.split("transformer-viewer", 1)[1])


def test_the_test_command_says_how_long_it_takes_on_two_cores():
    text = README.read_text(encoding="utf-8")
    after = text[text.index("python -m pytest -q"):]
    paragraph = " ".join(after.split("```", 1)[1].split("\n\n", 2)[:2])
    assert re.search(r"about \d+ minutes on a 2-core machine", " ".join(paragraph.split()))


def test_the_readme_names_the_head_the_first_command_opens_on():
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert "Head 2.2 is a previous-token head" in text and "the window opens on it" in text


class ShotOfTheHead(gui.Screenshot):
    seen: list[tuple[int, int]] = []

    def _shoot(self, error=None):
        if not self._done:
            ShotOfTheHead.seen.append((self.window.state.layer, self.window.state.head))
        super()._shoot(error)


def test_the_first_command_opens_on_head_2_2(qapp, tmp_path, monkeypatch):
    argv = first_command()
    assert argv[0] == "--prompt" and len(argv) == 2
    monkeypatch.setattr(gui, "Screenshot", ShotOfTheHead)
    ShotOfTheHead.seen = []
    args = gui_parser().parse_args([*argv, "--device", "cpu", "--screenshot", str(tmp_path / "shot.png")])
    assert gui.run(args) == 0
    assert ShotOfTheHead.seen == [(2, 2)]
