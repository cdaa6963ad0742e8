"""The analysis views in the real main window: residual, MLP, logit lens, head scan, diff, Continue."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt

from tests.helpers.handlers import swap_handler
from tests.helpers.models import scaled_init_loaded
from tests.helpers.window import analysis_views, idle_and, open_window
from transformer_viewer.model.analysis.generate import generate
from transformer_viewer.model.analysis.lens import logit_lens
from transformer_viewer.model.analysis.scan import head_scan
from transformer_viewer.model.capture.on_demand import head_pattern, mlp_activations
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer

PROMPT = "The cat sat on the mat because the cat was tired. The dog"
WAIT_MS = 30000  # generous: the machine is shared with a training run


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("analysis") / "tiny.safetensors"
    save_checkpoint(scaled_init_loaded().model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def wide_ckpt(tmp_path_factory):
    """4 layers x 8 heads: a scan of 32 heads, long enough to cancel in the middle."""
    path = tmp_path_factory.mktemp("analysis") / "wide.safetensors"
    config = GPTConfig(n_layer=4, n_head=8, n_embd=32, block_size=64)
    save_checkpoint(scaled_init_loaded(config=config).model, str(path))
    return str(path)


def seen(qtbot, window, view_id: str):
    """The view `view_id`, brought to the front as a user would before reading it (a view behind
    another tab draws when it is shown)."""
    window.show_view(view_id)
    view = window.views[view_id]
    qtbot.waitUntil(view.isVisible)
    return view


@pytest.fixture
def window(qtbot, tmp_path, ckpt):
    w = open_window(qtbot, tmp_path, ckpt, PROMPT)
    yield w
    w.close()


def set_mask(qtbot, w, *heads):
    mask = np.zeros((w.state.n_layer, w.state.n_head), dtype=bool)
    for layer, head in heads:
        mask[layer, head] = True
    w.state.set_mask(mask)
    qtbot.waitUntil(idle_and(w, lambda: np.array_equal(w.state.trace.mask, mask)), timeout=WAIT_MS)


def shown_activations(qtbot, window, layer, *traces):
    """Show the MLP view and wait for the (T, n_mlp) activations of `layer` in `traces`, which it
    asks the worker for (a trace keeps per-neuron summaries only)."""
    st = window.state
    window.show_view("mlp")
    qtbot.waitUntil(idle_and(window, lambda: all(st.layer_activations(t, layer) is not None for t in traces)),
                    timeout=WAIT_MS)
    return [st.layer_activations(t, layer).astype(np.float32) for t in traces]


def raw_norms(ckpt, prompt, mask=None):
    """Residual norms recomputed from raw activations, without the capture code."""
    from transformer_viewer.model.capture.interventions import head_mask_hooks

    loaded = load_checkpoint(ckpt)
    ids = torch.tensor([Tokenizer().encode(prompt)])
    acts = {}

    def keep(name):
        def hook(_m, _i, out):
            acts[name] = out[0].float()
        return hook
    L = loaded.config.n_layer
    names = ["hook_embed"] + [f"blocks.{la}.hook_resid_{w}" for la in range(L) for w in ("pre", "mid")]
    names.append(f"blocks.{L - 1}.hook_resid_post")
    extra = head_mask_hooks(mask, "zero") if mask is not None else []
    with torch.no_grad(), hooks(loaded.model, [(n, keep(n)) for n in names] + extra):
        loaded.model(ids)
    return np.stack([acts[n].norm(dim=-1).numpy() for n in names])  # (2L + 2, T)


def test_residual_view_values_equal_the_trace_and_raw_activations(window, qtbot, ckpt):
    view = seen(qtbot, window, "residual")
    st = window.state
    trace = st.trace
    np.testing.assert_array_equal(view.matrix(), trace.resid_norms)
    assert view.row_labels() == trace.resid_labels and view.col_labels() == trace.labels
    np.testing.assert_allclose(view.matrix(), raw_norms(ckpt, PROMPT), rtol=1e-5, atol=1e-5)
    st.set_selection(layer=1, head=2, query=4)
    np.testing.assert_array_equal(view.heads.matrix(), trace.head_norms[1])
    assert view.heads.highlighted_row() == 2
    curve = view.line.getPlotItem().listDataItems()[-1]
    np.testing.assert_array_equal(curve.getData()[1], trace.resid_norms[:, 4])
    # masked: the view follows the masked model and matches the raw masked activations
    set_mask(qtbot, window, (0, 1))
    mask = st.mask
    np.testing.assert_allclose(view.matrix(), raw_norms(ckpt, PROMPT, mask), rtol=1e-5, atol=1e-5)


def test_diff_views_are_zero_unmasked_and_masked_minus_clean_when_masked(window, qtbot):
    a = analysis_views(window)
    st = window.state
    st.set_selection(layer=1, head=0)
    assert not a.residual.diff.isEnabled()
    seen(qtbot, window, "diff")
    assert not np.any(a.diff.matrix()) and a.diff.matrix().shape == (st.n_tokens, st.n_tokens)
    assert "exactly zero" in a.diff.info.text()
    set_mask(qtbot, window, (0, 2))
    for v in (a.residual, a.mlp, a.lens):
        assert v.diff.isEnabled()
        v.diff.setChecked(True)
    trace, clean = st.trace, st.clean_trace
    assert trace is not clean
    seen(qtbot, window, "residual")
    np.testing.assert_array_equal(a.residual.matrix(), trace.resid_norms - clean.resid_norms)
    assert not np.any(a.residual.matrix()[:2]) and np.all(np.any(a.residual.matrix()[2:], axis=1))  # from 0.mid on
    session = window.worker.worker.session  # idle: the worker's own recompute, as its views get it
    want = head_pattern(session, trace, 1, 0) - head_pattern(session, clean, 1, 0)
    # Drawn from the traces' float16 overviews (one cell per token at this length): 2 roundings.
    seen(qtbot, window, "diff")
    np.testing.assert_allclose(a.diff.matrix(), want, atol=2 ** -11)
    assert np.abs(want).max() > 1e-3
    acts, clean_acts = shown_activations(qtbot, window, 1, trace, clean)
    np.testing.assert_array_equal(acts, mlp_activations(session, trace, 1))
    order = a.mlp.order()
    want_mlp = (acts - clean_acts).T[order]
    np.testing.assert_array_equal(a.mlp.matrix(), want_mlp)
    window.show_view("logit-lens")
    qtbot.waitUntil(idle_and(window, lambda: a.lens._current() is not None), timeout=WAIT_MS)
    r = a.lens._current()
    np.testing.assert_array_equal(a.lens.matrix(), r.diff)
    assert a.lens.heatmap.levels()[0] == -a.lens.heatmap.levels()[1]  # centred at zero
    # unmasking: the toggles switch off and every view shows the clean model again
    window.state.set_mask(np.zeros_like(st.mask))
    qtbot.waitUntil(idle_and(window, lambda: st.trace is st.clean_trace), timeout=WAIT_MS)
    assert not a.residual.diff.active
    seen(qtbot, window, "residual")
    np.testing.assert_array_equal(a.residual.matrix(), st.trace.resid_norms)
    seen(qtbot, window, "diff")
    assert not np.any(a.diff.matrix())


def test_lens_view_last_row_is_the_models_prediction(window, qtbot, ckpt):
    a = analysis_views(window)
    window.show_view("logit-lens")
    qtbot.waitUntil(idle_and(window, lambda: a.lens._current() is not None), timeout=WAIT_MS)
    r = a.lens._current()
    trace = window.state.trace
    assert a.lens.cover.message() is None
    assert r.lens.top_ids[-1, -1] == trace.next.top_ids[0]
    np.testing.assert_array_equal(a.lens.matrix(), r.lens.top_probs)
    assert not np.any(r.diff)
    ref = Session(load_checkpoint(ckpt), keep_full=True)
    ref.set_prompt(PROMPT)
    ref.run()
    np.testing.assert_array_equal(logit_lens(ref).top_ids, r.lens.top_ids)
    assert len(a.lens.heatmap.text_items()) == r.lens.top_ids.size  # 3 x 14 cells: tokens are written in
    window.state.set_selection(query=3)
    assert a.lens.table.item(2, 3).text() == "0"  # the final row ranks its own top token first
    assert a.lens.table.item(0, 1).text() == ref.tokenizer.label(int(r.lens.top_ids[0, 3]))


@pytest.mark.parametrize("view_id", ["logit-lens", "attribution"])
def test_a_cancelled_lens_or_attribution_says_so_and_asks_again(window, qtbot, monkeypatch, view_id):
    """Cancelled on the worker (the status bar's Cancel), the view says it stopped instead of
    "computing…" for ever, and selecting a token asks for it again."""
    from transformer_viewer.viewer.worker import requests
    from transformer_viewer.viewer.worker.attribution import AttributionRequest
    from transformer_viewer.viewer.worker.lens import LensRequest

    request_type = LensRequest if view_id == "logit-lens" else AttributionRequest
    calls = []

    def cancelled_once(session, request, progress, is_cancelled):
        calls.append(request)
        if len(calls) == 1:
            raise requests.Cancelled()
        return real(session, request, progress, is_cancelled)

    real = swap_handler(monkeypatch, request_type, cancelled_once)
    view = window.views[view_id]
    window.show_view(view_id)
    qtbot.waitUntil(idle_and(window, lambda: len(calls) == 1), timeout=WAIT_MS)
    assert "stopped" in view.info.text() and view.result is None
    assert view.cover.message() == view.info.text()  # over the plot, which has nothing to show
    window.state.set_selection(query=2)
    qtbot.waitUntil(idle_and(window, lambda: view.result is not None), timeout=WAIT_MS)
    assert len(calls) >= 2 and "stopped" not in view.info.text()
    qtbot.waitUntil(lambda: view.cover.message() is None, timeout=WAIT_MS)  # the plot shows


def test_mlp_view_sorting_top_list_and_neuron_selection(window, qtbot):
    from transformer_viewer.viewer.views.token_strip import chip_values

    a, st = analysis_views(window), window.state
    st.set_selection(layer=1, query=5)
    acts = shown_activations(qtbot, window, 1, st.trace)[0].T  # (n_mlp, T)
    a.mlp.set_sort("token")
    assert a.mlp.order()[0] == int(np.argmax(acts[:, 5]))
    assert np.all(np.diff(a.mlp.matrix()[:, 5]) <= 0)
    a.mlp.set_sort("index")
    np.testing.assert_array_equal(a.mlp.order(), np.arange(64))
    a.mlp.set_sort("max")
    assert np.all(np.diff(a.mlp.matrix().max(axis=1)) <= 0)
    top = a.mlp.top_list()
    assert [n for n, _ in top] == list(np.argsort(-acts[:, 5], kind="stable")[: len(top)])
    assert top[0][1] == pytest.approx(float(acts[top[0][0], 5]), abs=1e-4)
    a.mlp._on_table_click(2, 0)
    assert st.neuron == top[2][0]
    values, _ = chip_values(st, "neuron")
    np.testing.assert_array_equal(values, acts[top[2][0]])
    assert window.token_strip.mode == "neuron"


def test_scan_view_runs_matches_the_library_and_click_masks(window, qtbot, ckpt):
    from transformer_viewer.viewer.views.scan_view import NO_SCAN

    a, st = analysis_views(window), window.state
    window.show_view("scan")
    assert a.scan.cover.message() == NO_SCAN  # not the empty plot's placeholder axes
    st.set_selection(query=6)
    a.scan.target_edit.setText(" the")
    a.scan.run()
    qtbot.waitUntil(lambda: not a.scan.running, timeout=WAIT_MS)
    assert a.scan.cover.message() is None
    r = a.scan.result
    ref = Session(load_checkpoint(ckpt), keep_full=True)
    ref.set_prompt(PROMPT)
    want = head_scan(ref, target=262, position=6)
    assert r.target_id == 262 and r.position == 6 and not r.cancelled
    np.testing.assert_allclose(a.scan.matrix(), want.effect, atol=1e-5)
    a.scan.shown_combo.setCurrentIndex(a.scan.shown_combo.findData("kl"))
    np.testing.assert_allclose(a.scan.matrix(), want.kl, rtol=1e-4, atol=1e-7)
    a.scan.heatmap.cell_clicked.emit(1, 3)
    assert st.mask[1, 3]
    a.scan.target_edit.setText("two tokens")
    a.scan.run()
    assert "2 GPT-2 tokens" in a.scan.info.text() and not a.scan.running


def test_cancel_stops_a_scan_within_a_layer_and_the_window_stays_usable(qtbot, tmp_path, wide_ckpt):
    w = open_window(qtbot, tmp_path, wide_ckpt, PROMPT)
    try:
        a = analysis_views(w)
        model = w.worker.worker.session.model
        # A slow model: every block sleeps, so the 32-head scan takes seconds; `blocks` counts them.
        blocks = []
        handles = [b.register_forward_pre_hook(lambda *_: blocks.append(time.sleep(0.04))) for b in model.blocks]
        w.show_view("scan")
        a.scan.run()
        qtbot.waitUntil(lambda: a.scan.progress.value() >= 2, timeout=WAIT_MS)
        started = len(blocks)
        qtbot.mouseClick(a.scan.cancel_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not a.scan.running, timeout=WAIT_MS)
        # The scan checks for a cancel as each block starts: at most the block running at the
        # click and the next one begin after it, out of the 4 a head's forward can take.
        assert len(blocks) - started <= 2
        for h in handles:
            h.remove()
        r = a.scan.result
        assert r.cancelled and 2 <= r.n_done < 32
        assert "cancelled after" in a.scan.info.text()
        assert np.isnan(a.scan.matrix()[~r.done]).all()
        # still usable: a mask change recomputes, and a new scan runs to the end
        set_mask(qtbot, w, (2, 5))
        ref = Session(load_checkpoint(wide_ckpt), keep_full=True)
        ref.set_prompt(PROMPT)
        mask = np.zeros((4, 8), dtype=bool)
        mask[2, 5] = True
        assert w.state.trace.next.top_ids[0] == ref.predict(mask).top_ids[0]
        a.scan.run()
        qtbot.waitUntil(lambda: not a.scan.running, timeout=WAIT_MS)
        assert not a.scan.result.cancelled and a.scan.result.n_done == 31
    finally:
        w.close()
    assert not w.worker.thread.isRunning()


def test_continue_appends_greedy_tokens_and_views_cover_them(window, qtbot, ckpt):
    a, st = analysis_views(window), window.state
    a.generate.n_spin.setValue(5)
    a.generate.start()
    qtbot.waitUntil(idle_and(window, lambda: not a.generate.running and st.prompt != PROMPT),
                    timeout=WAIT_MS)
    ref = Session(load_checkpoint(ckpt), keep_full=True)
    ref.set_prompt(PROMPT)
    gen = generate(ref, 5)
    assert st.prompt == PROMPT + gen.new_text
    qtbot.waitUntil(idle_and(window, lambda: st.trace.text == st.prompt), timeout=WAIT_MS)
    assert window.prompt_editor.text() == st.prompt
    T = st.trace.n_tokens
    shown_activations(qtbot, window, st.layer, st.trace)
    assert a.mlp.matrix().shape[1] == T
    assert seen(qtbot, window, "residual").matrix().shape[1] == T
    # sampled with a seed: the same seed, the same continuation
    a.generate.mode_combo.setCurrentIndex(1)
    a.generate.seed_spin.setValue(7)
    req = a.generate.request()
    assert req.temperature == pytest.approx(1.0) and req.seed == 7 and req.top_k == 40
    assert req.intervention == st.intervention


def test_a_prompt_edited_while_generating_is_kept(window, qtbot):
    """The continuation of the old prompt never replaces what the user typed meanwhile."""
    a, st = analysis_views(window), window.state
    a.generate.n_spin.setValue(40)
    a.generate.start()
    assert a.generate.running
    window.prompt_editor.set_text("A prompt typed while the model was generating")
    qtbot.waitUntil(idle_and(window, lambda: not a.generate.running), timeout=WAIT_MS)
    assert st.prompt == window.prompt_editor.text() == "A prompt typed while the model was generating"
    assert "edited" in a.generate.info.text()
    qtbot.waitUntil(idle_and(window, lambda: st.trace.text == st.prompt), timeout=WAIT_MS)
    # Generating from the new prompt appends to it as usual.
    a.generate.n_spin.setValue(3)
    a.generate.start()
    qtbot.waitUntil(idle_and(window, lambda: not a.generate.running), timeout=WAIT_MS)
    assert st.prompt.startswith("A prompt typed while the model was generating") and len(st.prompt) > 46


def test_views_export_png_svg_npy_csv(window, qtbot, tmp_path):
    from transformer_viewer.viewer.export import read_csv_matrix

    a = analysis_views(window)
    shown_activations(qtbot, window, window.state.layer, window.state.trace)
    window.show_view("logit-lens")
    qtbot.waitUntil(idle_and(window, lambda: a.lens._current() is not None), timeout=WAIT_MS)
    for name in ("residual", "mlp", "logit-lens", "diff"):
        view = seen(qtbot, window, name)  # a view's Export button is on screen with it
        for ext in (".png", ".svg", ".npy", ".csv"):
            path = str(tmp_path / f"{name}{ext}")
            assert view.export_button.export(path) == path
        assert open(tmp_path / f"{name}.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
        svg = (tmp_path / f"{name}.svg").read_text()
        assert svg.startswith("<?xml") and "<image" in svg
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy"), view.matrix())
        m, rows, cols = read_csv_matrix(tmp_path / f"{name}.csv")
        np.testing.assert_allclose(m, view.matrix(), rtol=1e-6)
        assert tuple(rows) == tuple(view.row_labels()) and tuple(cols) == tuple(view.col_labels())


def test_export_cli_views(ckpt, tmp_path, capsys, qapp):
    from transformer_viewer.viewer.cli.main import main

    def export(view, out, *extra):
        rc = main(["export", "--checkpoint", ckpt, "--prompt", PROMPT, "--view", view, "--out", str(out), *extra])
        captured = capsys.readouterr()
        assert rc == 0, captured.err
        return captured

    ref = Session(load_checkpoint(ckpt), keep_full=True)
    ref.set_prompt(PROMPT)
    clean = ref.run()
    export("residual", tmp_path / "r.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "r.npy"), clean.resid_norms)
    rc = main(["export", "--checkpoint", ckpt, "--prompt", PROMPT, "--view", "residual", "--diff",
               "--out", str(tmp_path / "rd.npy")])
    assert rc == 2 and "--mask" in capsys.readouterr().err
    export("residual", tmp_path / "rd.npy", "--diff", "--mask", "1.2")
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 2] = True
    rd = np.load(tmp_path / "rd.npy")
    np.testing.assert_array_equal(rd, ref.run(mask).resid_norms - clean.resid_norms)
    assert not np.any(rd[:4]) and np.any(rd[4:])  # layer 1's heads change nothing before 1.mid
    export("diff", tmp_path / "d.npy", "--layer", "1", "--head", "1", "--mask", "0.0")
    mask = np.zeros((2, 4), dtype=bool)
    mask[0, 0] = True
    masked = ref.run(mask)
    want = masked.attention[1, 1].astype(np.float32) - clean.attention[1, 1].astype(np.float32)
    np.testing.assert_array_equal(np.load(tmp_path / "d.npy"), want)
    export("mlp", tmp_path / "m.csv", "--layer", "1", "--sort", "index", "--rows", "5")
    from transformer_viewer.viewer.export import read_csv_matrix

    m, rows, _ = read_csv_matrix(tmp_path / "m.csv")
    assert rows == ["n0", "n1", "n2", "n3", "n4"]
    # The export recomputes the layer in float32, as the window's MLP view does.
    np.testing.assert_allclose(m, mlp_activations(ref, clean, 1)[:, :5].T, rtol=1e-6, atol=1e-7)
    export("logit-lens", tmp_path / "l.npy")
    ref.run()
    np.testing.assert_array_equal(np.load(tmp_path / "l.npy"), logit_lens(ref).top_probs)
    export("scan", tmp_path / "s.npy", "--target", " the", "--show", "kl")
    np.testing.assert_allclose(np.load(tmp_path / "s.npy"), head_scan(ref, target=262).kl, rtol=1e-4, atol=1e-7)
    export("scan", tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    rc = main(["export", "--checkpoint", ckpt, "--prompt", PROMPT, "--view", "scan", "--target", "two words",
               "--out", str(tmp_path / "x.png")])
    assert rc == 2 and "2 GPT-2 tokens" in capsys.readouterr().err
