"""`transformer-viewer [CHECKPOINT] --screenshot FILE.png` and the window's command line."""

from __future__ import annotations

import argparse

import pytest
from PySide6.QtGui import QImage

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli import gui
from transformer_viewer.viewer.cli.main import gui_parser, main


def parse(*argv) -> argparse.Namespace:
    return gui_parser().parse_args(list(argv))


def test_arguments():
    args = parse("model.safetensors", "--prompt", "hi", "--device", "cpu", "--n-head", "4", "--screenshot", "x.png")
    assert (args.checkpoint, args.prompt, args.device, args.n_head, args.screenshot) == (
        "model.safetensors", "hi", "cpu", 4, "x.png")
    args = parse()
    assert args.checkpoint is None and args.device == "auto" and args.screenshot is None


def test_screenshot_writes_the_whole_window(qapp, tiny_ckpt, tmp_path, capsys):
    out = tmp_path / "shot.png"
    assert gui.run(parse(tiny_ckpt, "--prompt", "The cat sat on the mat", "--device", "cpu",
                         "--screenshot", str(out))) == 0
    image = QImage(str(out))
    assert not image.isNull()
    assert image.width() >= 1280 and image.height() >= 800
    assert "wrote" in capsys.readouterr().out
    # not a blank window: the heatmap and chips put many colours on it
    colours = {image.pixel(x, y) for x in range(0, image.width(), 37) for y in range(0, image.height(), 23)}
    assert len(colours) > 50


def test_screenshot_of_a_bad_checkpoint_fails_with_its_message(qapp, tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"junk")
    out = tmp_path / "shot.png"
    out.write_bytes(b"the user's earlier picture")
    assert gui.run(parse(str(bad), "--screenshot", str(out))) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.pt" in err and len(err.splitlines()) == 1
    assert out.read_bytes() == b"the user's earlier picture"  # a failed screenshot writes nothing
    # The same words `info` uses for the same file.
    assert main(["info", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == err


def test_screenshot_of_an_empty_prompt_writes_no_file(qapp, tiny_ckpt, tmp_path, capsys):
    out = tmp_path / "shot.png"
    assert gui.run(parse(tiny_ckpt, "--prompt", "", "--device", "cpu", "--screenshot", str(out))) == 2
    assert capsys.readouterr().err.strip() == "error: the prompt is empty; pass some text with --prompt"
    assert not out.exists()


@pytest.mark.parametrize("name", ["shot.jpg", "missing/shot.png"])
def test_screenshot_path_is_checked_first(tmp_path, name):
    with pytest.raises(ModelError):
        gui.run(parse("--screenshot", str(tmp_path / name)))
