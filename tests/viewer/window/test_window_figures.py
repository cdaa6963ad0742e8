"""Every export of the window writes the manifest the export command writes, through one dialog
and one function, and `transformer-viewer export --from-manifest` regenerates what the window
wrote: a PNG pixel for pixel, .npy bit for bit, .csv byte for byte, an SVG the same drawing from
the manifest embedded in it."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PySide6 import QtWidgets

from tests.helpers.figures import png_pixels, regenerate, without_embedded_manifest
from tests.helpers.sae_window import HOOK, opened
from tests.helpers.window import PROMPT, mask_of, new_window, wait_idle
from transformer_viewer.model.sessions.figure_manifest import read_manifest
from transformer_viewer.viewer.views.export_options import ExportOptionsDialog
from transformer_viewer.viewer.window.actions import export

CORRUPTED = PROMPT.replace("sat", "ran")  # as many tokens: every kind patches by position


@pytest.fixture
def window(qtbot, tmp_path, tiny_ckpt, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_VIEWER_NO_DIALOGS", "1")
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    w.state.set_mask(mask_of(w, (0, 1)))  # a masked head: the title and the diff views show it
    w.state.set_selection(layer=1, head=2, query=4)
    wait_idle(qtbot, w, lambda: w.state.trace is not None and bool(w.state.trace.mask.any()))
    yield w
    w.close()


def _front(qtbot, w, view_id: str):
    view = w.views[view_id]
    w.show_view(view_id)
    wait_idle(qtbot, w, lambda: view.matrix().size > 0)
    qtbot.wait(30)  # the shown view's last layout pass
    return view


def _answer_dialogs(monkeypatch, path, **boxes) -> None:
    """The options dialog accepted with `boxes` (e.g. embed_box=True) checked or not, and the
    file dialog answered with `path`."""
    def accept(dialog):
        for name, on in boxes.items():
            getattr(dialog, name).setChecked(on)
        return QtWidgets.QDialog.DialogCode.Accepted

    monkeypatch.setattr(ExportOptionsDialog, "exec", accept)
    monkeypatch.setattr(QtWidgets.QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(path), "")))


@pytest.mark.parametrize("view_id", ["attention", "grid", "residual", "logit-lens"])
def test_a_window_png_regenerates_pixel_for_pixel(qtbot, tmp_path, capsys, window, view_id):
    w = window
    view = _front(qtbot, w, view_id)
    if view_id == "attention":
        view.set_log_scale(True)
        view.set_colormap("magma")
    if view_id == "grid":
        view.set_colormap("inferno")
        view.set_log_scale(True)
    if view_id == "residual":
        view.diff.setChecked(True)
        wait_idle(qtbot, w, lambda: view.diff.active)
    first = export(w, view_id, str(tmp_path / "first.png"), scale=2.0, theme="dark", manifest=True)
    assert first is not None, w.last_error
    records, _notes = read_manifest(first + ".manifest.json")
    target = view.export_target() if hasattr(view, "export_target") else view
    e = records["export"]
    assert e.view == view_id and e.scale == 2.0 and e.theme == "dark" and e.size[0] == target.width()
    assert records["intervention"].masked == ((0, 1),) and records["prompt"].text == PROMPT
    again = regenerate(capsys, first + ".manifest.json", tmp_path / "again.png")
    a, b = png_pixels(first), png_pixels(again)
    assert a.shape == b.shape and a.shape[1] == 2 * e.size[0]
    assert np.array_equal(a, b)
    assert w.exported_figures[-1].view == view_id and w.exported_figures[-1].manifest == first + ".manifest.json"


def test_a_view_button_export_goes_through_the_window_with_its_manifest(qtbot, tmp_path, capsys, window,
                                                                       monkeypatch):
    w = window
    view = _front(qtbot, w, "mlp")
    view.set_sort("index")
    view.rows_spin.setValue(12)
    wait_idle(qtbot, w, lambda: view.matrix().shape[0] == 12)
    path = tmp_path / "mlp.png"
    _answer_dialogs(monkeypatch, path)
    view.export_button.dialog(".png")
    assert w.exported_figures[-1].path == str(path) and w.exported_figures[-1].view == "mlp"
    e = read_manifest(str(path) + ".manifest.json")[0]["export"]
    assert (e.sort, e.rows, e.layer, e.query) == ("index", 12, 1, 4)
    again = regenerate(capsys, str(path) + ".manifest.json", tmp_path / "again.png")
    assert np.array_equal(png_pixels(path), png_pixels(again))


def test_data_exports_regenerate_bit_for_bit(qtbot, tmp_path, capsys, window, monkeypatch):
    w = window
    _front(qtbot, w, "logit-lens")
    npy = export(w, "logit-lens", str(tmp_path / "lens.npy"), manifest=True)
    again = regenerate(capsys, npy + ".manifest.json", tmp_path / "again.npy")
    a, b = np.load(npy), np.load(again)
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    _front(qtbot, w, "attention")
    csv = tmp_path / "attention.csv"
    _answer_dialogs(monkeypatch, csv)
    w.actions_.export_dialog("attention", ".csv")
    assert read_manifest(str(csv) + ".manifest.json")[0]["export"].pooled
    again = regenerate(capsys, str(csv) + ".manifest.json", tmp_path / "again.csv")
    assert open(csv, "rb").read() == open(again, "rb").read()


def test_an_svg_with_its_manifest_embedded_and_private_regenerates_from_itself(qtbot, tmp_path, capsys, window,
                                                                                monkeypatch, tiny_ckpt):
    from tests.helpers.rasterise import rasterise_svg

    w = window
    _front(qtbot, w, "residual")
    svg = tmp_path / "residual.svg"
    _answer_dialogs(monkeypatch, svg, manifest_box=False, embed_box=True, private_box=True)
    w.views["residual"].export_button.dialog(".svg")
    assert not os.path.exists(str(svg) + ".manifest.json") and w.exported_figures[-1].manifest is None
    records, _notes = read_manifest(str(svg))
    assert "prompt" not in records and records["export"].embed and records["export"].private
    assert PROMPT not in str(records) and os.path.dirname(tiny_ckpt) not in str(records)
    again = regenerate(capsys, svg, tmp_path / "again.svg", "--checkpoint", tiny_ckpt, "--prompt", PROMPT)
    assert without_embedded_manifest(open(svg, "rb").read()) == without_embedded_manifest(open(again, "rb").read())
    a = png_pixels(rasterise_svg("rsvg-convert", svg, tmp_path / "a.png", zoom=2))
    b = png_pixels(rasterise_svg("rsvg-convert", again, tmp_path / "b.png", zoom=2))
    assert a.shape == b.shape and np.array_equal(a, b)
    assert read_manifest(again)[0]["export"].size == records["export"].size


def test_a_pdf_with_its_manifest_embedded_regenerates_from_itself(qtbot, tmp_path, capsys, window):
    from tests.helpers.rasterise import rasterise_pdf

    pdf = export(window, "grid", str(tmp_path / "grid.pdf"), embed=True)
    assert read_manifest(pdf)[0]["prompt"].text == PROMPT
    again = regenerate(capsys, pdf, tmp_path / "again.pdf")
    assert np.array_equal(png_pixels(rasterise_pdf(pdf, tmp_path / "a")), png_pixels(rasterise_pdf(again, tmp_path / "b")))


def test_the_dialog_of_an_export_no_manifest_can_rebuild_writes_none_and_says_why(qtbot, tmp_path, window,
                                                                                    monkeypatch):
    from transformer_viewer.viewer.window.figure_records import PAIRS_NOT_REGENERABLE

    dialog = ExportOptionsDialog(window, ".svg", (300, 200), window.figure_options, no_manifest=PAIRS_NOT_REGENERABLE)
    qtbot.addWidget(dialog)
    for box in (dialog.manifest_box, dialog.embed_box, dialog.private_box):
        assert not box.isEnabled() and not box.isChecked() and box.toolTip() == PAIRS_NOT_REGENERABLE
    seen = {}
    original = ExportOptionsDialog.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen["boxes"] = self.manifest_box.isEnabled(), self.manifest_box.toolTip()

    monkeypatch.setattr(ExportOptionsDialog, "__init__", spy)
    _answer_dialogs(monkeypatch, tmp_path / "patching.png")
    window.views["patching"].export_button.dialog(".png")
    assert seen["boxes"] == (True, "")  # one prompt pair: the patching view has its manifest
    window.state.set_patching(comparing=True, pairs=((PROMPT, PROMPT.replace("cat", "dog")),), pairs_name="p.tsv")
    window.views["patching"].export_button.dialog(".png")
    assert seen["boxes"] == (False, PAIRS_NOT_REGENERABLE)
    assert window.figure_options.manifest  # the box stays on for the next export


def _patching(qtbot, w, **setup):
    """The window's patching view comparing PROMPT with CORRUPTED (one token changed), its exact
    grid computed under the window's head mask."""
    from transformer_viewer.model.tokenizers.tokenizer import Tokenizer

    tok = Tokenizer()
    w.state.set_patching(tokens=(tok.encode(" cat")[0], tok.encode(" dog")[0]), **setup)
    w.views["corrupted-prompt"].set_text(CORRUPTED)
    w.show_view("patching")
    view = w.views["patching"]
    wait_idle(qtbot, w, lambda: view.exact is not None)
    qtbot.wait(30)  # the shown view's last layout pass
    return view


def test_the_patching_views_png_regenerates_pixel_for_pixel(qtbot, tmp_path, capsys, window):
    w = window
    view = _patching(qtbot, w, what="mlp", direction="noise", normalised=False)  # the raw metric drawn
    first = export(w, "patching", str(tmp_path / "patching.png"), scale=1.5, manifest=True)
    assert first is not None, w.last_error
    records, _notes = read_manifest(first + ".manifest.json")
    p, e = records["patching"], records["export"]
    assert (p.corrupted, p.what, p.direction, p.normalised) == (CORRUPTED, "mlp", "noise", False)
    assert records["prompt"].text == PROMPT and records["intervention"].masked == ((0, 1),) and not e.estimate
    again = regenerate(capsys, first + ".manifest.json", tmp_path / "again.png")
    a, b = png_pixels(first), png_pixels(again)
    assert a.shape == b.shape and a.shape[1] == round(1.5 * e.size[0])
    assert np.array_equal(a, b)
    npy = export(w, "patching", str(tmp_path / "patching.npy"), manifest=True)
    assert np.load(npy).tobytes() == view.exact.raw.tobytes()  # the raw metric, whatever the heatmap's scale
    again = regenerate(capsys, npy + ".manifest.json", tmp_path / "again.npy")
    assert np.load(again).tobytes() == np.load(npy).tobytes()


def test_the_shown_estimate_regenerates_as_the_estimate(qtbot, tmp_path, capsys, window):
    w = window
    view = _patching(qtbot, w, what="resid")
    view.show_estimate.setChecked(True)
    first = export(w, "patching", str(tmp_path / "estimate.png"), scale=1.0, manifest=True)
    assert read_manifest(first + ".manifest.json")[0]["export"].estimate
    again = regenerate(capsys, first + ".manifest.json", tmp_path / "again.png")
    assert np.array_equal(png_pixels(first), png_pixels(again))


@pytest.mark.parametrize("view_id", ["attention", "logit-lens"])
def test_a_zoomed_heatmap_regenerates_zoomed_pixel_for_pixel(qtbot, tmp_path, capsys, window, view_id):
    from transformer_viewer.viewer.window.figure_records import regeneration_notes

    w = window
    view = _front(qtbot, w, view_id)
    R, C = view.heatmap.token_size()
    view.heatmap.view.setRange(xRange=(1.25, C - 2.5), yRange=(0.5, R - 0.75), padding=0)  # as a wheel leaves it
    qtbot.wait(30)
    (x0, x1), (y0, y1) = view.heatmap.view.viewRange()
    assert view.heatmap.is_zoomed() and regeneration_notes(view_id, view) == ()
    first = export(w, view_id, str(tmp_path / "zoomed.png"), scale=1.5, manifest=True)
    region = read_manifest(first + ".manifest.json")[0]["export"].region
    assert region == (x0, x1, y0, y1) and region == pytest.approx((1.25, C - 2.5, 0.5, R - 0.75))
    again = regenerate(capsys, first + ".manifest.json", tmp_path / "again.png")
    assert np.array_equal(png_pixels(first), png_pixels(again))
    view.heatmap.reset_view()
    whole = export(w, view_id, str(tmp_path / "whole.png"), scale=1.5, manifest=True)
    assert read_manifest(whole + ".manifest.json")[0]["export"].region is None
    assert png_pixels(whole).shape == png_pixels(first).shape and not np.array_equal(png_pixels(whole),
                                                                                     png_pixels(first))


def test_what_a_manifest_cannot_say_is_said_in_the_dialog(qtbot, tmp_path, window, monkeypatch):
    from transformer_viewer.viewer.window.figure_records import regeneration_notes

    w = window
    heatmap = _front(qtbot, w, "attention").heatmap
    assert regeneration_notes("attention", w.attention) == ()
    heatmap.highlight_col(2)
    notes = regeneration_notes("attention", w.attention)
    assert [n.split(";")[0] for n in notes] == ["a key column is marked here"]
    seen = {}
    original = ExportOptionsDialog.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen["text"] = self.notes_label.text()

    monkeypatch.setattr(ExportOptionsDialog, "__init__", spy)
    _answer_dialogs(monkeypatch, tmp_path / "marked.png")
    w.actions_.export_dialog("heatmap", ".png")
    assert seen["text"].startswith("A key column is marked here")
    heatmap.highlight_col(None)
    assert regeneration_notes("attention", w.attention) == ()


def test_the_embed_box_is_offered_for_svg_and_pdf_only(qtbot, window):
    for ext, offered in ((".png", False), (".svg", True), (".pdf", True), (".csv", False)):
        dialog = ExportOptionsDialog(window, ext, (300, 200))
        qtbot.addWidget(dialog)
        dialog.embed_box.setChecked(True)
        assert dialog.embed_box.isVisibleTo(dialog) == offered and dialog.options().embed == offered
        assert dialog.private_box.isEnabled()  # the manifest box is on by default
        dialog.manifest_box.setChecked(False)
        assert dialog.private_box.isEnabled() == offered  # the embedded manifest can still be private


def test_a_heads_full_pattern_has_its_manifest_and_regenerates_bit_for_bit(qtbot, tmp_path, capsys, window):
    from transformer_viewer.viewer.window.pattern_export import export_pattern

    w = window
    path = str(tmp_path / "pattern.npy")
    assert export_pattern(w, path) is not None
    qtbot.waitUntil(lambda: bool(w.exported_figures), timeout=60000)
    assert w.exported_figures[-1].manifest == path + ".manifest.json"
    e = read_manifest(path + ".manifest.json")[0]["export"]
    assert (e.view, e.pooled, e.mode, e.layer, e.head) == ("attention", False, "head", 1, 2)
    again = regenerate(capsys, path + ".manifest.json", tmp_path / "again.npy")
    a, b = np.load(path), np.load(again)
    assert a.shape == (w.state.trace.n_tokens,) * 2 and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_a_figure_exported_under_a_feature_clamp_regenerates_pixel_for_pixel(qtbot, tmp_path, capsys, tiny_ckpt,
                                                                               sae_folder):
    w = new_window(qtbot, tmp_path / "w", tiny_ckpt)
    st = w.state
    opened(qtbot, w, sae_folder)
    st.saes.set_feature(5)
    controls = w.views["token-features"].clamp_controls
    controls.set_choice("scale", 3.0)
    clamp = controls.clamp()
    wait_idle(qtbot, w, lambda: st.trace.intervention.clamps == (clamp,))
    _front(qtbot, w, "logit-lens")
    first = export(w, "logit-lens", str(tmp_path / "lens.png"), manifest=True)
    st.set_selection(layer=1, head=2)
    data = export(w, "heatmap", str(tmp_path / "att.npy"), manifest=True)
    w.close()
    records = read_manifest(first + ".manifest.json")[0]
    (sae,) = records["saes"].saes  # the SAE the clamp names, reopened from the manifest
    assert sae.spec == str(sae_folder) and sae.hook == HOOK and records["intervention"].clamps == (clamp,)
    again = regenerate(capsys, first + ".manifest.json", tmp_path / "again.png")
    assert np.array_equal(png_pixels(first), png_pixels(again))
    again = regenerate(capsys, data + ".manifest.json", tmp_path / "again.npy")
    assert np.load(data).tobytes() == np.load(again).tobytes()


def test_rollout_and_routes_settings_export_cannot_set_are_said(qtbot, window):
    from transformer_viewer.viewer.window.figure_records import regeneration_notes

    w = window
    rollout, routes = _front(qtbot, w, "rollout"), _front(qtbot, w, "routes")
    assert regeneration_notes("rollout", rollout) == () and regeneration_notes("routes", routes) == ()
    rollout.residual.setChecked(False)
    routes.threshold.setValue(20)
    assert "rollout's layers, heads or residual" in regeneration_notes("rollout", rollout)[0]
    assert "routes' threshold" in regeneration_notes("routes", routes)[0]
