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
    def trace(mask=None, ablation="zero"):
        s = Session(load_checkpoint(ckpt), keep_full=True)
        s.set_prompt(PROMPT)
        return s.run(mask, ablation)
    return trace


def export(capsys, ckpt, out, *extra, prompt=PROMPT):
    rc = main(["export", "--checkpoint", ckpt, "--prompt", prompt, "--out", str(out), *extra])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_npy_is_the_head_pattern(ckpt, reference, capsys, tmp_path, qapp):
    rc, out, err = export(capsys, ckpt, tmp_path / "a.npy", "--layer", "1", "--head", "2")
    assert rc == 0, err
    assert out.strip() == str(tmp_path / "a.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), reference().attention[1, 2].astype(np.float32))


def test_csv_has_token_labels(ckpt, reference, capsys, tmp_path, qapp):
    rc, _, err = export(capsys, ckpt, tmp_path / "a.csv", "--layer", "0", "--head", "3", "--mode", "layer-mean")
    assert rc == 0, err
    values, rows, cols = read_csv_matrix(tmp_path / "a.csv")
    tr = reference()
    assert tuple(rows) == tr.labels == tuple(cols) and "," in cols  # the comma token survives quoting
    np.testing.assert_allclose(values, tr.attention[0].astype(np.float32).mean(0), rtol=1e-6)


def test_mask_changes_later_layers(ckpt, reference, capsys, tmp_path, qapp):
    rc, _, err = export(capsys, ckpt, tmp_path / "m.npy", "--layer", "1", "--head", "0", "--mask", "0.0", "0.1",
                        "--mask", "0.2", "--mask", "0.3", "--ablation", "mean")  # repeated --mask adds up
    assert rc == 0, err
    mask = np.zeros((2, 4), dtype=bool)
    mask[0] = True
    masked = reference(mask, "mean").attention[1, 0].astype(np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "m.npy"), masked)
    assert not np.array_equal(masked, reference().attention[1, 0].astype(np.float32))


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

    assert {"attention", "grid", "residual", "mlp", "logit-lens", "scan", "diff", "attribution", "routes",
            "rollout"} == set(registry.exportable())
    probe = registry.ViewEntry("Probe", "transformer_viewer.viewer.views.diff_view:AttentionDiffView", "tab",
                               export_name="probe", export_size=(300, 200))
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
