"""The patching view's figures: the `patch` command's .png/.svg/.pdf (viewer/cli/patch_figure.py)
and the view's own Export button, titled with the metric, both prompts and the normalisation,
drawn alike by librsvg, Chromium and the PDF."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from tests.helpers.rasterise import mismatch, pixels, rasterise_pdf, rasterise_svg
from tests.helpers.window import reference_session
from transformer_viewer.model.analysis.patching.exact import patch_grid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer
from transformer_viewer.viewer.cli.patch_figure import write_figure

CLEAN = "When Mary and John went to the store, John gave a drink to"
SWAPPED = "When Mary and John went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def grid(tiny_ckpt):
    tok = Tokenizer()
    session = reference_session(tiny_ckpt, CLEAN)
    session.set_corrupted(SWAPPED)
    metric = PatchMetric.make("logit-diff", (tok.encode(" Mary")[0], tok.encode(" John")[0]))
    return patch_grid(session, "heads", metric)


def _svg_text(path) -> str:
    return " ".join(t for t in ET.parse(path).getroot().itertext())


def test_the_figure_is_drawn_alike_by_every_renderer_and_titled(grid, tmp_path, qapp):
    svg, pdf = tmp_path / "p.svg", tmp_path / "p.pdf"
    write_figure(grid, CLEAN, SWAPPED, str(svg), model="tiny")
    write_figure(grid, CLEAN, SWAPPED, str(pdf), model="tiny")
    text = _svg_text(svg)
    for words in ("tiny", "logit(", "corrupted = 0, clean = 1", "store, John gave", "store, Mary gave"):
        assert words in text, words
    root = ET.parse(svg).getroot()
    w, h = (round(float(v)) for v in root.get("viewBox").split()[2:])
    drawn_pdf = pixels(rasterise_pdf(pdf, tmp_path / "pdf"))
    for renderer in ("rsvg-convert", "chromium"):
        drawn = pixels(rasterise_svg(renderer, svg, tmp_path / f"{renderer}.png", size=(w, h)))
        assert mismatch(drawn, drawn_pdf) < 0.02, renderer


def test_a_raw_png_says_so_and_shows_a_diverging_grid(grid, tmp_path, qapp):
    png = tmp_path / "raw.png"
    written = write_figure(grid, CLEAN, SWAPPED, str(png), normalised=False)
    assert written == str(png) and png.read_bytes().startswith(b"\x89PNG")
    image = pixels(png)
    # Diverging colours: both blue-ish and red-ish cells (the grid has both signs).
    assert (grid.raw - grid.corrupted > 0).any() or (grid.raw < 0).any()
    assert np.ptp(image.reshape(-1, 3), axis=0).max() > 100
    svg = tmp_path / "raw.svg"
    write_figure(grid, CLEAN, SWAPPED, str(svg), normalised=False)
    assert "raw metric" in _svg_text(svg) and "corrupted = 0" not in _svg_text(svg)


def test_the_patch_command_draws_the_views_figure(tiny_ckpt, tmp_path, capsys, qapp):
    from tests.helpers.cli import cli

    out = tmp_path / "masked.svg"
    rc, _, err = cli(capsys, "patch", tiny_ckpt, "--clean", CLEAN, "--corrupted", SWAPPED, "--tokens", " Mary",
                     " John", "--what", "heads", "--mask", "0.1", "--out", str(out))
    assert rc == 0, err
    text = _svg_text(out)
    assert "head 0.1 masked" in text and "the head mask (1 head) applies to both runs" in text
    assert "heads activation patching, denoise" in text and "store, Mary gave" in text
    png = tmp_path / "grid.png"
    rc, _, err = cli(capsys, "patch", tiny_ckpt, "--clean", CLEAN, "--corrupted", SWAPPED, "--tokens", " Mary",
                     " John", "--what", "mlp", "--out", str(png))
    assert rc == 0 and png.read_bytes().startswith(b"\x89PNG"), err


def test_the_views_export_button_writes_its_figure_and_matrix(qtbot, tmp_path, tiny_ckpt, monkeypatch):
    from tests.helpers.window import new_window, wait_idle

    monkeypatch.setenv("TRANSFORMER_VIEWER_NO_DIALOGS", "1")
    tok = Tokenizer()
    w = new_window(qtbot, tmp_path, tiny_ckpt, prompt=CLEAN)
    try:
        w.state.set_patching(what="heads", tokens=(tok.encode(" Mary")[0], tok.encode(" John")[0]))
        w.views["corrupted-prompt"].set_text(SWAPPED)
        w.show_view("patching")
        view = w.views["patching"]
        wait_idle(qtbot, w, lambda: view.exact is not None)
        svg = view.export_button.export(str(tmp_path / "view.svg"))
        text = " ".join(_svg_text(svg).split())  # a note's line may wrap anywhere
        assert "Patching: heads activation patching" in text and "corrupted = 0, clean = 1" in text
        assert w.state.model_info.name in text and "no heads masked: both runs use the whole model" in text
        npy = view.export_button.export(str(tmp_path / "view.npy"))
        assert np.load(npy).tobytes() == view.exact.raw.tobytes()  # the raw metric, as `patch` writes it
        csv = view.export_button.export(str(tmp_path / "view.csv"))
        assert open(csv, encoding="utf-8").read().count("\n") >= view.exact.raw.shape[0]
    finally:
        w.close()
