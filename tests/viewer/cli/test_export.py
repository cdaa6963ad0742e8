"""`transformer-viewer export`: every format, --view grid, masks and modes, one-line errors."""

import os
import struct
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from tests.helpers.interventions import ablating
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.viewer.cli.main import main
from transformer_viewer.viewer.export import read_csv_matrix

PROMPT = "The cat sat on the mat, and the cat slept."


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("export") / "tiny.safetensors"
    save_checkpoint(GPT(GPTConfig(block_size=64, n_layer=2, n_head=4, n_embd=32)).eval(), str(path))
    return str(path)


@pytest.fixture(scope="module")
def reference(ckpt):
    def trace(mask=None, ablation="zero", dtype=np.float16):
        s = Session(load_checkpoint(ckpt), keep_full=True, pattern_dtype=dtype)
        s.set_prompt(PROMPT)
        return s.run(mask, ablation)
    return trace


def export(capsys, ckpt, out, *extra, prompt=PROMPT):
    rc = main(["export", "--checkpoint", ckpt, "--prompt", prompt, "--out", str(out), *extra])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_npy_is_the_head_pattern_exactly(ckpt, reference, capsys, tmp_path, qapp):
    """float32, as the forward computed it: not the trace's float16 copy (off by up to 2e-4)."""
    rc, out, err = export(capsys, ckpt, tmp_path / "a.npy", "--layer", "1", "--head", "2")
    assert rc == 0, err
    assert out.strip() == str(tmp_path / "a.npy")
    written = np.load(tmp_path / "a.npy")
    assert written.dtype == np.float32
    np.testing.assert_array_equal(written, reference(dtype=np.float32).attention[1, 2])


@pytest.mark.parametrize("mode", ["head", "layer-mean"])
def test_csv_is_exact_with_token_labels(ckpt, reference, capsys, tmp_path, qapp, mode):
    rc, _, err = export(capsys, ckpt, tmp_path / "a.csv", "--layer", "0", "--head", "3", "--mode", mode)
    assert rc == 0, err
    values, rows, cols = read_csv_matrix(tmp_path / "a.csv")
    tr = reference(dtype=np.float32)
    assert tuple(rows) == tr.labels == tuple(cols) and "," in cols  # the comma token survives quoting
    if mode == "head":  # %.9g reads back as the very float32
        np.testing.assert_array_equal(values.astype(np.float32), tr.attention[0, 3])
    else:  # a mean of four float32 patterns: rounding of the sum's order, nothing more
        np.testing.assert_allclose(values, tr.attention[0].mean(0), rtol=4 * np.finfo(np.float32).eps, atol=1e-9)


def test_mask_changes_later_layers(ckpt, reference, capsys, tmp_path, qapp):
    rc, _, err = export(capsys, ckpt, tmp_path / "m.npy", "--layer", "1", "--head", "0", "--mask", "0.0", "0.1",
                        "--mask", "0.2", "--mask", "0.3", "--ablation", "mean")  # repeated --mask adds up
    assert rc == 0, err
    mask = np.zeros((2, 4), dtype=bool)
    mask[0] = True
    masked = reference(mask, "mean", dtype=np.float32).attention[1, 0]
    np.testing.assert_array_equal(np.load(tmp_path / "m.npy"), masked)
    assert not np.array_equal(masked, reference(dtype=np.float32).attention[1, 0])


def test_png_and_scale(ckpt, capsys, tmp_path, qapp):
    rc, _, err = export(capsys, ckpt, tmp_path / "a.png", "--size", "500x400", "--colormap", "inferno", "--log")
    assert rc == 0, err
    rc, _, err = export(capsys, ckpt, tmp_path / "b.png", "--size", "500x400", "--scale", "2")
    assert rc == 0, err
    sizes = []
    for name in ("a.png", "b.png"):
        head = (tmp_path / name).read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        sizes.append(struct.unpack(">II", head[16:24]))
    assert sizes[1] == (2 * sizes[0][0], 2 * sizes[0][1])
    assert 400 <= sizes[0][0] <= 500  # the plot area of a 500-pixel-wide panel


def test_svg_has_the_heatmap_image(ckpt, capsys, tmp_path, qapp):
    rc, _, err = export(capsys, ckpt, tmp_path / "a.svg", "--query", "3")
    assert rc == 0, err
    root = ET.parse(tmp_path / "a.svg").getroot()
    assert any((im.get("{http://www.w3.org/1999/xlink}href") or "").startswith("data:image/png")
               for im in root.iter("{http://www.w3.org/2000/svg}image"))


@pytest.mark.parametrize("ext", [".png", ".svg", ".npy"])
def test_grid_view(ckpt, reference, capsys, tmp_path, qapp, ext):
    out = tmp_path / f"grid{ext}"
    rc, _, err = export(capsys, ckpt, out, "--view", "grid", "--mask", "1.2")
    assert rc == 0, err
    assert out.stat().st_size > 0
    if ext == ".npy":
        np.testing.assert_array_equal(np.load(out), reference().attention.astype(np.float32))


def test_grid_csv_is_refused(ckpt, capsys, tmp_path, qapp):
    rc, _, err = export(capsys, ckpt, tmp_path / "g.csv", "--view", "grid")
    assert rc == 2 and "export .npy instead" in err and err.count("\n") == 1
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("extra, message", [
    (["--layer", "5"], "--layer 5 does not exist; the model has layers 0..1"),
    (["--head", "4"], "--head 4 does not exist; the model has heads 0..3"),
    (["--mask", "9.0"], "layer 9 does not exist"),
    (["--query", "99"], "--query 99 is outside the prompt's"),
    (["--colormap", "nope"], "unknown colormap 'nope'"),
])
def test_bad_arguments_are_one_line(ckpt, capsys, tmp_path, qapp, extra, message):
    rc, _, err = export(capsys, ckpt, tmp_path / "a.png", *extra)
    assert rc == 2
    assert message in err and err.startswith("error: ") and err.count("\n") == 1
    assert os.listdir(tmp_path) == []


def test_bad_out_fails_before_loading(capsys, tmp_path, qapp):
    rc, _, err = export(capsys, str(tmp_path / "missing.safetensors"), tmp_path / "a.bmp")
    assert rc == 2 and "use a file name ending in .png, .svg, .pdf, .npy, .csv" in err
    rc, _, err = export(capsys, str(tmp_path / "missing.safetensors"), tmp_path / "nope" / "a.png")
    assert rc == 2 and "does not exist" in err and "missing.safetensors" not in err


def test_bad_size_is_an_argparse_error(ckpt, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        export(capsys, ckpt, tmp_path / "a.png", "--size", "big")
    assert e.value.code == 2


def test_a_registry_entry_is_an_export_choice(ckpt, capsys, tmp_path, monkeypatch):
    """The export command offers every view the registry marks exportable, built as the window builds it."""
    from transformer_viewer.viewer.views import registry

    assert {"attention", "grid", "residual", "mlp", "logit-lens", "scan", "diff", "attribution", "routes", "patching",
            "rollout"} == set(registry.exportable())
    probe = registry.ViewEntry("probe", "Probe", "transformer_viewer.viewer.views.diff_view:AttentionDiffView", "tab",
                               export=True, export_size=(300, 200))
    monkeypatch.setattr(registry, "VIEWS", (*registry.VIEWS, probe))
    rc, _, err = export(capsys, ckpt, tmp_path / "p.npy", "--view", "probe", "--mask", "0.0", "--layer", "1")
    assert rc == 0, err
    diff = np.load(tmp_path / "p.npy")
    assert diff.shape[0] == diff.shape[1] and np.abs(diff).max() > 0


@pytest.mark.parametrize("masked", [False, True])
def test_the_exported_state_has_the_log_probabilities_the_window_fills_in_later(ckpt, reference, masked, qapp):
    """The window gets them in a second pass after the views; an export waits for that pass."""
    import argparse

    from transformer_viewer.viewer.cli.export import _state
    from transformer_viewer.viewer.worker.handlers import WorkerSession
    from transformer_viewer.viewer.worker.inline import InlineWorker

    mask = np.zeros((2, 4), dtype=bool)
    mask[0, 1] = masked
    worker = InlineWorker(WorkerSession(load_checkpoint(ckpt), keep_full=True))
    st = _state(worker, ablating(mask), argparse.Namespace(prompt=PROMPT, query=None, layer=None, head=None))
    assert (st.trace is st.clean_trace) == (not masked)
    np.testing.assert_allclose(st.clean_trace.token_logprobs, reference().token_logprobs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(st.trace.token_logprobs, reference(mask if masked else None).token_logprobs,
                               rtol=1e-5, atol=1e-6)


def test_lens_export_widens_until_its_top_tokens_show(ckpt, capsys, tmp_path, qapp):
    long_prompt = " ".join(["the cat sat on the mat"] * 7)  # 42 positions: cells too narrow at the default size
    texts = {}
    for name, extra in (("widened", []), ("fixed", ["--size", "1300x520"])):
        out = tmp_path / f"{name}.svg"
        rc, _, err = export(capsys, ckpt, out, "--view", "logit-lens", *extra, prompt=long_prompt)
        assert rc == 0, err
        root = ET.parse(out).getroot()
        texts[name] = sum(1 for _ in root.iter("{http://www.w3.org/2000/svg}text"))
    cells = 3 * 42  # embedding and two layers, by every position
    assert texts["widened"] - texts["fixed"] >= cells  # --size is taken as given: its cells stay bare


def test_widening_stops_at_its_limit(qtbot, qapp):
    from transformer_viewer.viewer.cli.export import widen_for_cell_texts
    from transformer_viewer.viewer.views.parts import TextHeatmap

    def heatmap_of(columns):
        view = TextHeatmap()
        qtbot.addWidget(view)  # closed and deleted while the app lives
        view.set_data(np.random.default_rng(0).random((2, columns)), ["a", "b"], [f"t{i}" for i in range(columns)],
                      levels=(0.0, 1.0))
        view.set_cell_text([[f"w{i}" for i in range(columns)]] * 2)
        view.resize(500, 300)
        view.show()
        qtbot.waitExposed(view)
        return view

    wide = heatmap_of(40)
    assert not wide.texts_visible()
    widen_for_cell_texts(wide, qapp)
    assert wide.texts_visible() and wide.width() >= 40 * 40
    capped = heatmap_of(200)  # 8,000 px of cells: past the limit, left as it is
    widen_for_cell_texts(capped, qapp, max_width=4000)
    assert not capped.texts_visible() and capped.width() == 500


# -- figures for a page ---------------------------------------------------------------------------
def svg_texts(path) -> list[str]:
    return ["".join(el.itertext()) for el in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}text")]


def corner(path) -> tuple[int, int, int]:
    from PySide6 import QtGui

    return QtGui.QColor(QtGui.QImage(str(path)).pixel(1, 1)).getRgb()[:3]


def test_a_figure_is_light_by_default_and_dark_on_request(ckpt, capsys, tmp_path, qapp):
    for theme, page in ((None, (255, 255, 255)), ("light", (255, 255, 255)), ("dark", (0, 0, 0))):
        out = tmp_path / f"{theme}.png"
        rc, _, err = export(capsys, ckpt, out, "--dpi", "48", *(["--theme", theme] if theme else []))
        assert rc == 0, err
        assert corner(out) == page


@pytest.mark.parametrize("view", ["attention", "residual"])
def test_a_figure_has_no_widgets_and_says_the_model_the_view_and_the_mask(ckpt, capsys, tmp_path, qapp, view):
    out = tmp_path / "f.svg"
    rc, _, err = export(capsys, ckpt, out, "--view", view, "--head", "1.2", "--query", "3", "--mask", "0.1", "0.3")
    assert rc == 0, err
    texts = svg_texts(out)
    title = texts[0]
    assert os.path.basename(ckpt) in title and "heads 0.1, 0.3 masked (zero ablation)" in title
    assert ("Attention: layer 1 head 2" if view == "attention" else "Residual stream") in title
    assert not {"Reset zoom", "Log scale", "Export…", "Export", "Show", "Colours", "Fit"} & set(texts)  # no buttons
    names = {"query", "key"} if view == "attention" else {"stream", "head", "token"}
    assert names <= {t.strip() for t in texts}  # axis titles, which the residual view hides on screen
    assert any("marks the space the token starts with" in t for t in texts)  # what "·" means


def test_width_and_dpi_set_a_pngs_pixels_and_size_wins(ckpt, capsys, tmp_path, qapp):
    from PySide6 import QtGui

    rc, _, err = export(capsys, ckpt, tmp_path / "a.png", "--width", "3.5in", "--dpi", "200")
    assert rc == 0, err
    image = QtGui.QImage(str(tmp_path / "a.png"))
    assert image.width() == 700  # 3.5 in x 200 dpi
    assert image.dotsPerMeterX() == pytest.approx(200 / 0.0254, rel=1e-3)  # and the PNG says its dpi
    rc, _, err = export(capsys, ckpt, tmp_path / "b.png", "--width", "8cm")
    assert rc == 0, err
    assert QtGui.QImage(str(tmp_path / "b.png")).width() == round(8 / 2.54 * 300)  # 300 dpi by default
    rc, _, err = export(capsys, ckpt, tmp_path / "c.png", "--width", "8cm", "--size", "500x400")
    assert rc == 0, err
    assert (QtGui.QImage(str(tmp_path / "c.png")).width(), QtGui.QImage(str(tmp_path / "c.png")).height()) == (500, 400)


@pytest.mark.parametrize("ext", [".svg", ".pdf"])
def test_width_is_the_vector_figures_physical_size(ckpt, capsys, tmp_path, qapp, ext):
    import re

    out = tmp_path / f"f{ext}"
    rc, _, err = export(capsys, ckpt, out, "--width", "8cm")
    assert rc == 0, err
    if ext == ".svg":
        width = ET.parse(out).getroot().get("width")
        assert width.endswith("mm") and float(width[:-2]) == pytest.approx(80, abs=0.3)
    else:
        box = [float(v) for v in re.search(rb"/MediaBox \[([^\]]+)\]", out.read_bytes()).group(1).split()]
        assert box[2] == pytest.approx(8 / 2.54 * 72, abs=1)  # points


def test_every_pdf_font_is_embedded(ckpt, capsys, tmp_path, qapp):
    import re
    import zlib

    out = tmp_path / "f.pdf"
    rc, _, err = export(capsys, ckpt, out, "--view", "residual")
    assert rc == 0, err
    data = out.read_bytes()
    streams = [zlib.decompress(m) for m in re.findall(rb"/FlateDecode.*?stream\r?\n(.*?)endstream", data, re.S)
               if m[:1] == b"x"]  # object streams may hold the font dictionaries
    text = data + b"".join(streams)
    descriptors = re.findall(rb"/Type\s*/FontDescriptor.*?>>", text, re.S)
    assert descriptors and all(re.search(rb"/FontFile[23]?\s", d) for d in descriptors)


def test_a_png_over_the_memory_budget_is_one_line_before_the_model_loads(capsys, tmp_path, qapp, monkeypatch):
    monkeypatch.setattr("transformer_viewer.viewer.cli.common.load_from_args",
                        lambda *_a, **_k: pytest.fail("the model loaded"))
    rc, out, err = export(capsys, "no-such-model", tmp_path / "a.png", "--size", "16384x16384")
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: a 16384 x 16384 pixel PNG needs 1.0 GiB")
    assert "memory budget" in err and os.listdir(tmp_path) == []
    monkeypatch.setenv("TV_MEMORY_BUDGET_MB", "64")  # 8 MiB an image: 2000 x 2000 is over
    rc, out, err = export(capsys, "no-such-model", tmp_path / "a.png", "--size", "2000x2000")
    assert rc == 2 and "over the 8.0 MiB" in err


def test_pooled_writes_the_overview_with_a_sidecar_saying_so(ckpt, reference, capsys, tmp_path, qapp):
    import json

    rc, _, err = export(capsys, ckpt, tmp_path / "p.npy", "--head", "1.2", "--pooled")
    assert rc == 0, err
    tr = reference()
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), tr.overview_max[1, 2].astype(np.float32))
    side = json.loads((tmp_path / "p.npy.json").read_text())
    assert side["layer"] == 1 and side["head"] == 2 and side["tokens_per_cell"] == 1
    assert side["pooling"].startswith("none") and side["n_tokens"] == tr.n_tokens and "float16" in side["stored_as"]
    assert side["kernel_path"].startswith("gemm=")  # the kernels the numbers come from


def test_a_large_data_export_says_its_size_first(ckpt, capsys, tmp_path, qapp, monkeypatch):
    from transformer_viewer.viewer.cli import export as export_cli

    monkeypatch.setattr(export_cli, "LARGE_FILE", 100)
    rc, _, err = export(capsys, ckpt, tmp_path / "a.csv")
    assert rc == 0, err
    assert err.startswith("note: writing the full 12 x 12 pattern, about 1.8 KiB")


def test_head_takes_layer_dot_head(ckpt, capsys, tmp_path, qapp):
    rc, _, err = export(capsys, ckpt, tmp_path / "a.npy", "--head", "1.2")
    assert rc == 0, err
    rc, _, err = export(capsys, ckpt, tmp_path / "b.npy", "--layer", "1", "--head", "2")
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    rc, _, err = export(capsys, ckpt, tmp_path / "c.npy", "--layer", "0", "--head", "1.2")
    assert rc == 2 and err == "error: --head 1.2 names layer 1 but --layer is 0; give one of them\n"
    rc, _, err = export(capsys, ckpt, tmp_path / "c.npy", "--head", "1.9")
    assert rc == 2 and "--head 9 does not exist" in err


def test_a_prompt_over_the_context_is_noted_as_predict_notes_it(ckpt, capsys, tmp_path, qapp):
    long_prompt = " ".join(["the cat sat on the mat"] * 20)  # 120 tokens, a context of 64
    rc, _, err = export(capsys, ckpt, tmp_path / "a.npy", prompt=long_prompt)
    assert rc == 0
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes == ["note: the prompt is longer than the model's context of 64 tokens; kept its last 64 "
                     "(dropped the first 56), positions count from there"]
    assert np.load(tmp_path / "a.npy").shape == (64, 64)
    rc = main(["predict", "--checkpoint", ckpt, "--prompt", long_prompt])
    assert rc == 0 and notes[0] in capsys.readouterr().err.splitlines()


def test_a_high_dpi_png_is_the_same_figure_in_more_pixels(ckpt, capsys, tmp_path, qapp):
    """Fonts are sized once: a 192-dpi PNG, averaged over 2 x 2 pixels, is the 96-dpi one (an
    image that told Qt its dpi while being painted drew every point-sized text twice as big)."""
    from tests.helpers.rasterise import mismatch, pixels

    for dpi in (96, 192):
        rc, _, err = export(capsys, ckpt, tmp_path / f"{dpi}.png", "--view", "residual", "--dpi", str(dpi))
        assert rc == 0, err
    small, large = pixels(tmp_path / "96.png"), pixels(tmp_path / "192.png")
    h, w = small.shape[:2]
    assert large.shape[:2] == (2 * h, 2 * w)
    halved = large.reshape(h, 2, w, 2, 3).mean(axis=(1, 3))
    assert mismatch(halved, small, threshold=96) < 0.01


def test_scan_notes_a_prompt_over_the_context_as_predict_does(ckpt, capsys, qapp):
    long_prompt = " ".join(["the cat sat on the mat"] * 20)
    assert main(["predict", "--checkpoint", ckpt, "--prompt", long_prompt]) == 0
    note = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert main(["scan", "--checkpoint", ckpt, "--prompt", long_prompt, "--top", "1"]) == 0
    assert note and note[0] in capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("view", ["logit-lens", "mlp"])
def test_a_view_request_failing_inside_qt_events_is_one_line(ckpt, capsys, tmp_path, qapp, monkeypatch, view):
    """A view asks the worker from a show or resize event, where Qt would print the error as a
    traceback (or the process would die): the export command says it in one line instead, and
    writes nothing."""
    from transformer_viewer.model.errors import ModelError
    from transformer_viewer.viewer.worker import inline
    from transformer_viewer.viewer.worker.lens import LensRequest
    from transformer_viewer.viewer.worker.mlp import MlpActivationsRequest

    failing = LensRequest if view == "logit-lens" else MlpActivationsRequest
    real = inline.lookup_handler

    def lookup(kind):
        if kind is failing:
            def refuse(*_args):
                raise ModelError("the view's request was refused; try again")
            return refuse, True
        return real(kind)

    monkeypatch.setattr(inline, "lookup_handler", lookup)
    out = tmp_path / "view.png"
    rc, stdout, err = export(capsys, ckpt, out, "--view", view)
    assert rc == 2
    assert err.strip() == "error: the view's request was refused; try again"
    assert "Traceback" not in err and stdout == ""
    assert not out.exists()
