"""The main window end to end, offscreen: prompt -> tokens -> heatmap, query selection, live
masking against Session.predict, bad checkpoints, keyboard, export, recent files, shutdown."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from tests.helpers.handlers import swap_handler
from tests.helpers.window import PROMPT, mask_of, new_window, reference_session, wait_idle
from transformer_viewer.model.capture.on_demand import mlp_activations
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer
from transformer_viewer.viewer.views.logits_panel import compare, token_label
from transformer_viewer.viewer.window import actions as window_actions


def chip_center(window, i: int) -> QPoint:
    return window.token_strip.canvas.rects[i].center()


def mask_cell_center(window, layer: int, head: int) -> QPointF:
    canvas = window.mask_grid.canvas
    left, top = canvas._margins()
    c = canvas._cell()
    return QPointF(left + (head + 0.5) * c, top + (layer + 0.5) * c)


def assert_probs_as_predicted(window, expected) -> None:
    """The window's next-token probabilities against a reference session's prediction: the
    window's trace is a capture, which reads the last layer in other GEMM shapes than a
    prediction, so they agree to the float32 rule (tests/helpers/tolerances.py)."""
    from tests.helpers.tolerances import assert_probs_close, largest_logit, model_reduction

    st = window.state
    ref = reference_session(st.model_info.source)
    c = ref.config
    assert_probs_close(st.trace.next.probs, expected.probs, logit_scale=largest_logit(ref.model, st.trace.token_ids),
                       reduction=model_reduction(c), depth=c.n_layer + 1, what="next-token probabilities")


def test_typing_a_prompt_updates_tokens_and_heatmap(qtbot, window):
    editor = window.prompt_editor.edit
    editor.clear()
    qtbot.keyClicks(editor, "Hello there, general")
    expected = Tokenizer().tokenize("Hello there, general")
    wait_idle(qtbot, window, lambda: window.state.trace is not None and window.state.trace.labels == expected.labels)
    assert window.token_strip.canvas.labels == expected.labels
    T = len(expected.ids)
    matrix = window.attention.matrix()
    assert matrix.shape == (T, T)
    # A trace keeps float16 overviews (one cell per token at this length): the reference's pattern.
    ref = reference_session(window.state.model_info.source, "Hello there, general").run()
    np.testing.assert_array_equal(matrix, ref.attention[0, 0].astype(np.float32))
    assert window.attention.row_labels() == expected.labels
    assert window.head_grid.matrix().shape == (2, 4, T, T)


def test_clicking_a_token_selects_the_query_everywhere(qtbot, window):
    st = window.state
    qtbot.mouseClick(window.token_strip.canvas, Qt.LeftButton, pos=chip_center(window, 2))
    assert st.query == 2
    assert window.attention.heatmap.highlighted_row() == 2
    assert window.token_strip.canvas.selected == 2
    wait_idle(qtbot, window, lambda: st.trace.next.position == 2)
    assert st.clean_trace.next.position == 2  # the baseline follows too
    assert "position 2" in window.logits.header.text()
    expected = reference_session(window.state.model_info.source).predict(position=2)
    assert_probs_as_predicted(window, expected)


def test_heatmap_click_selects_the_query_row(qtbot, window):
    window.attention.cell_clicked.emit(3, 1)
    assert window.state.query == 3


def test_mask_toggle_changes_the_logits_and_matches_predict(qtbot, window):
    st = window.state
    before = [row[3] for row in window.logits.rows()]
    qtbot.mouseClick(window.mask_grid.canvas, Qt.LeftButton, pos=mask_cell_center(window, 0, 1).toPoint())
    assert st.mask[0, 1] and st.mask.sum() == 1
    wait_idle(qtbot, window, lambda: st.trace is not None and st.trace.mask[0, 1])
    expected = reference_session(st.model_info.source).predict(mask_of(window, (0, 1)))
    assert_probs_as_predicted(window, expected)
    rows = window.logits.rows()
    assert [r[2] for r in rows] == [token_label(i, Tokenizer()) for i in expected.top_ids]
    np.testing.assert_allclose([r[3] for r in rows], expected.top_probs, rtol=2e-3, atol=1e-6)  # as displayed
    assert [r[3] for r in rows] != before
    c = window.logits.comparison
    ref = compare(st.clean_trace.next, expected)
    assert c.new_rank == ref.new_rank and c.kl == pytest.approx(ref.kl, rel=1e-3, abs=1e-6)  # float32 sums: a KL of 5e-4 carries ~1e-7 of rounding
    assert c.kl > 0 and "KL(baseline" in window.logits.summary.text()
    assert window.head_grid.mask()[0, 1]


def test_a_toggle_lands_the_views_then_the_masked_log_probabilities(qtbot, window):
    st = window.state
    qtbot.mouseClick(window.mask_grid.canvas, Qt.LeftButton, pos=mask_cell_center(window, 1, 0).toPoint())
    first = []
    st.trace_changed.connect(lambda t: t is not None and t.mask[1, 0] and first.append(t.token_logprobs is None))
    wait_idle(qtbot, window, lambda: st.trace is not None and st.trace.mask[1, 0]
              and st.trace.token_logprobs is not None)
    assert first[0]  # the views got the trace before its log-probabilities existed
    ref = reference_session(st.model_info.source)
    ref.run()
    want = ref.run(mask_of(window, (1, 0))).token_logprobs
    np.testing.assert_allclose(st.trace.token_logprobs, want, rtol=1e-5, atol=1e-6)


def test_a_new_prompt_lands_the_views_then_the_clean_log_probabilities(qtbot, window):
    st = window.state
    first = []
    st.clean_trace_changed.connect(lambda t: first.append(t.token_logprobs is None))
    editor = window.prompt_editor.edit
    editor.clear()
    qtbot.keyClicks(editor, "The keeper climbed the stairs")
    wait_idle(qtbot, window, lambda: st.trace is not None and st.trace.text == "The keeper climbed the stairs"
              and st.trace.token_logprobs is not None)
    assert first[0] and not first[-1]  # the views before the log-probabilities, then the same run with them
    assert st.trace is st.clean_trace  # the clean trace on screen stays one object
    ref = reference_session(st.model_info.source)
    ref.set_prompt("The keeper climbed the stairs")
    np.testing.assert_allclose(st.clean_trace.token_logprobs, ref.run().token_logprobs, rtol=1e-5, atol=1e-6)


def test_a_toggle_shows_the_prediction_before_the_views_catch_up(qtbot, window, monkeypatch):
    """The worker answers the masked next-token distribution (PredictRequest) before the
    capture that redraws everything; held here, the capture cannot hide which came first."""
    import threading

    from transformer_viewer.viewer.worker import requests
    from transformer_viewer.viewer.worker.handlers import handle_trace

    gate = threading.Event()
    masked_traces = []

    def held_trace(session, request, progress, is_cancelled):
        if request.intervention is not None and not request.intervention.is_empty:
            masked_traces.append(request)
            gate.wait(30)
        return handle_trace(session, request, progress, is_cancelled)

    swap_handler(monkeypatch, requests.TraceRequest, held_trace)
    st = window.state
    try:
        qtbot.mouseClick(window.mask_grid.canvas, Qt.LeftButton, pos=mask_cell_center(window, 1, 0).toPoint())
        qtbot.waitUntil(lambda: window.logits.preview, timeout=10000)
        assert masked_traces and not st.trace.mask.any()  # the views still show the clean run
        expected = reference_session(st.model_info.source).predict(mask_of(window, (1, 0)))
        rows = window.logits.rows()
        assert [r[2] for r in rows] == [token_label(i, Tokenizer()) for i in expected.top_ids]
        np.testing.assert_allclose([r[3] for r in rows], expected.top_probs, rtol=2e-3, atol=1e-6)
        assert "1 head masked" in window.logits.summary.text() and "Updating" in window.logits.summary.text()
    finally:
        gate.set()
    wait_idle(qtbot, window, lambda: st.trace is not None and st.trace.mask[1, 0])
    assert not window.logits.preview and "Updating" not in window.logits.summary.text()
    assert_probs_as_predicted(window, expected)


def test_masked_panel_equals_the_predict_command(qtbot, window, capsys):
    import json

    from transformer_viewer.viewer.cli.main import main

    st = window.state
    st.set_mask(mask_of(window, (1, 0), (1, 3)))
    st.set_selection(query=4)
    wait_idle(qtbot, window, lambda: st.trace.mask[1, 3] and st.trace.next.position == 4)
    capsys.readouterr()
    assert main(["predict", "--checkpoint", st.model_info.source, "--prompt", PROMPT, "--device", "cpu",
                 "--mask", "1.0", "1.3", "--position", "4", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["position"] == 4
    assert [t["id"] for t in cli["top"]] == [int(i) for i in st.trace.next.top_ids]
    np.testing.assert_allclose([t["prob"] for t in cli["top"]], st.trace.next.top_probs, rtol=1e-5, atol=1e-7)
    shown = [r[3] for r in window.logits.rows()]
    np.testing.assert_allclose(shown, [t["prob"] for t in cli["top"]], rtol=2e-3, atol=1e-6)


def test_kl_and_rank_of_the_comparison():
    from transformer_viewer.model.capture.trace import NextToken

    p = np.array([0.5, 0.3, 0.2], dtype=np.float32)
    q = np.array([0.2, 0.5, 0.3], dtype=np.float32)
    base = NextToken(0, p, np.array([0, 1, 2]), p, np.log(p))
    masked = NextToken(0, q, np.array([1, 2, 0]), q[[1, 2, 0]], np.log(q[[1, 2, 0]]))
    c = compare(base, masked)
    assert c.top_id == 0 and c.new_rank == 3
    assert c.kl == pytest.approx(float(np.sum(p * np.log(p / q))), rel=1e-6)
    assert c.delta == pytest.approx(-0.3)
    assert compare(base, base).kl == pytest.approx(0.0, abs=1e-9)


def test_mask_grid_drag_right_click_clear_invert(qtbot, window):
    st, canvas = window.state, window.mask_grid.canvas
    qtbot.mousePress(canvas, Qt.LeftButton, pos=mask_cell_center(window, 1, 0).toPoint())
    for head in (1, 2, 3):
        qtbot.mouseMove(canvas, pos=mask_cell_center(window, 1, head).toPoint())
    qtbot.mouseRelease(canvas, Qt.LeftButton, pos=mask_cell_center(window, 1, 3).toPoint())
    assert st.mask[1].all() and not st.mask[0].any()
    qtbot.mouseClick(canvas, Qt.RightButton, pos=mask_cell_center(window, 0, 2).toPoint())
    assert st.mask.all()
    qtbot.mouseClick(canvas, Qt.RightButton, pos=mask_cell_center(window, 0, 2).toPoint())
    assert not st.mask[0].any() and st.mask[1].all()
    qtbot.mouseClick(window.mask_grid.invert_button, Qt.LeftButton)
    assert st.mask[0].all() and not st.mask[1].any()
    qtbot.mouseClick(window.mask_grid.clear_button, Qt.LeftButton)
    assert not st.mask.any()
    window.mask_grid.ablation_buttons["mean"].setChecked(True)
    assert st.ablation == "mean"
    st.toggle_head(0, 0)
    wait_idle(qtbot, window, lambda: st.trace.mask[0, 0] and st.trace.ablation == "mean")
    expected = reference_session(st.model_info.source).predict(mask_of(window, (0, 0)), ablation="mean")
    assert_probs_as_predicted(window, expected)


def test_a_bad_checkpoint_shows_the_error_and_keeps_the_model(qtbot, window, tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError) as loader_error:
        load_checkpoint(str(bad))
    info, trace = window.state.model_info, window.state.trace
    window.load(str(bad))
    wait_idle(qtbot, window, lambda: window.last_error is not None)
    assert window.last_error == str(loader_error.value)
    assert window._error_box.isVisible() and window._error_box.text() == str(loader_error.value)
    assert window.state.model_info is info and window.state.trace is trace
    window._error_box.close()
    window.run_prompt("still works")
    wait_idle(qtbot, window, lambda: window.state.trace.text == "still works")


def test_cancelling_a_load_keeps_the_model(qtbot, window, other_ckpt, monkeypatch):
    """A load that shows its progress has a Cancel button; pressing it stops the load at its
    next tensor, and the window keeps the model, trace and mask it had."""
    from transformer_viewer.model.checkpoints import load_watch
    from transformer_viewer.viewer.worker import handlers

    real_load = handlers.load_checkpoint

    def slow_load(path, progress=None, is_cancelled=None, **kw):
        deadline = time.monotonic() + 5
        while not is_cancelled() and time.monotonic() < deadline:  # held (on the worker) until cancelled
            progress(0, 10, load_watch.READING)  # shows the bar and its Cancel button
            time.sleep(0.01)
        return real_load(path, progress=progress, is_cancelled=is_cancelled, **kw)

    monkeypatch.setattr(handlers, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(handlers, "load_checkpoint", slow_load)
    window.state.toggle_head(1, 0)
    wait_idle(qtbot, window)
    info, trace, mask = window.state.model_info, window.state.trace, window.state.mask.copy()
    window.load(other_ckpt)
    qtbot.waitUntil(lambda: window.status.cancel_button.isVisible(), timeout=5000)
    assert "loading other.safetensors: reading the weights (1 of 10 tensors)" in window.status.currentMessage()
    qtbot.mouseClick(window.status.cancel_button, Qt.LeftButton)
    wait_idle(qtbot, window)
    assert window.state.model_info is info and window.state.trace is trace
    np.testing.assert_array_equal(window.state.mask, mask)
    assert window.status.currentMessage() == f"loading cancelled; {info.name} is still open"
    assert not window.status.cancel_button.isVisible()
    assert window.last_error is None and "other.safetensors" not in window.status.model_label.text()
    monkeypatch.setattr(handlers, "load_checkpoint", real_load)
    window.load(other_ckpt)  # the same file loads when asked again
    wait_idle(qtbot, window, lambda: window.state.model_info.n_layer == 3)


def test_loading_another_model_resets_the_mask_shape(qtbot, window, other_ckpt):
    window.state.toggle_head(1, 3)
    window.load(other_ckpt)
    wait_idle(qtbot, window, lambda: window.state.model_info.n_layer == 3 and window.state.trace is not None)
    assert window.state.mask.shape == (3, 2) and not window.state.mask.any()
    assert window.state.trace.overview_max.shape[:2] == (3, 2)
    assert "other.safetensors" in window.status.model_label.text()
    assert window.actions_.recent()[0].endswith("other.safetensors")
    assert window.actions_.recent_menu.actions()[0].toolTip().endswith("other.safetensors")


def test_dropping_a_checkpoint_loads_it(qtbot, window, other_ckpt):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(other_ckpt)])
    event = QDropEvent(QPointF(50, 50), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    window.dropEvent(event)
    wait_idle(qtbot, window, lambda: window.state.model_info.n_layer == 3)


def test_keyboard_moves_layer_and_head(qtbot, window):
    st = window.state
    window.attention.heatmap.graphics.setFocus()
    target = window.attention.heatmap.graphics
    qtbot.keyClick(target, Qt.Key_Right)
    assert (st.layer, st.head) == (0, 1)
    qtbot.keyClick(target, Qt.Key_Down)
    assert (st.layer, st.head) == (1, 1)
    qtbot.keyClick(target, Qt.Key_Down)  # clamped at the last layer
    assert st.layer == 1
    qtbot.keyClick(target, Qt.Key_PageUp)
    assert st.layer == 0
    qtbot.keyClick(target, Qt.Key_PageDown)
    assert st.layer == 1
    qtbot.keyClick(target, Qt.Key_Left)
    assert st.head == 0
    ref = reference_session(st.model_info.source, st.trace.text).run()
    np.testing.assert_array_equal(window.attention.matrix(), ref.attention[1, 0].astype(np.float32))
    assert window.head_grid.selected() == (1, 0) and window.mask_grid.canvas.selected == (1, 0)
    # in the prompt editor the arrows move the cursor, not the selection
    window.prompt_editor.edit.setFocus()
    qtbot.keyClick(window.prompt_editor.edit, Qt.Key_Right)
    assert st.head == 0


def test_a_prompt_longer_than_the_context_is_cut_with_a_notice(qtbot, window):
    long_text = " ".join(f"w{i}" for i in range(200))
    window.run_prompt(long_text)
    wait_idle(qtbot, window, lambda: window.state.trace.dropped_tokens > 0)
    assert window.state.trace.n_tokens == 64
    notice = window.prompt_editor.notice
    assert notice.isVisibleTo(window) and "last 64" in notice.text()
    window.run_prompt("short")
    wait_idle(qtbot, window, lambda: window.state.trace.text == "short")
    assert not window.prompt_editor.notice.isVisibleTo(window)


def test_empty_prompt_says_what_to_do(qtbot, window):
    window.run_prompt("")
    assert "Type a prompt" in window.prompt_editor.notice.text()


def test_export_menu_core(qtbot, window, tmp_path):
    png = window_actions.export(window, "heatmap", str(tmp_path / "h.png"), scale=2.0)
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    npy = window_actions.export(window, "heatmap", str(tmp_path / "h.npy"))
    np.testing.assert_array_equal(np.load(npy), window.attention.matrix())
    assert window_actions.export(window, "heatmap", str(tmp_path / "h.csv")) is not None
    svg = window_actions.export(window, "heatmap", str(tmp_path / "h.svg"))
    assert b"<svg" in open(svg, "rb").read()
    grid = window_actions.export(window, "grid", str(tmp_path / "grid.png"))
    assert open(grid, "rb").read(4) == b"\x89PNG"
    assert window_actions.export(window, "heatmap", str(tmp_path / "h.jpg")) is None
    assert ".png" in window.last_error and "\n" not in window.last_error
    assert window_actions.export(window, "heatmap", str(tmp_path / "missing" / "h.png")) is None
    assert "does not exist" in window.last_error
    assert window_actions.export(window, "grid", str(tmp_path / "g.csv")) is None


def test_device_menu_without_cuda(qtbot, window):
    if window.cuda_available:
        pytest.skip("this machine has CUDA")
    qtbot.waitUntil(lambda: "CUDA" in window.actions_.cuda_action.toolTip(), timeout=10000)
    assert not window.actions_.cuda_action.isEnabled()
    assert window.actions_.cpu_action.isChecked()
    assert window.status.device_label.text() == "cpu"


def test_device_change_runs_on_the_worker_and_keeps_the_view(qtbot, window):
    st = window.state
    trace = st.trace
    window.set_device("cpu")
    wait_idle(qtbot, window)
    assert st.model_info.device == "cpu" and st.trace is not None
    np.testing.assert_array_equal(st.trace.attention, trace.attention)
    if not window.cuda_available:
        window.set_device("cuda")
        wait_idle(qtbot, window, lambda: window.last_error is not None)
        assert "CUDA" in window.last_error and st.model_info.device == "cpu"
        assert window.actions_.cpu_action.isChecked()


def test_view_menu_toggles_every_dock(window):
    texts = {a.text() for a in window.actions_.view_menu.actions()}
    for dock in window.docks.values():
        assert dock.windowTitle() in texts
        dock.toggleViewAction().trigger()
        assert not dock.isVisible()
        dock.toggleViewAction().trigger()
        assert dock.isVisible()
    window.docks["next-token"].close()
    window.actions_.reset_layout()
    assert window.docks["next-token"].isVisible()


def test_busy_indicator_shows_only_for_slow_work(qtbot, window):
    status = window.status
    status.set_busy(True)
    assert not status.progress.isVisible()
    qtbot.waitUntil(status.progress.isVisible, timeout=5000)
    status.set_busy(False)
    assert not status.progress.isVisible()


def test_a_progress_message_goes_when_the_work_ends_and_others_stay(window):
    from types import SimpleNamespace

    from transformer_viewer.viewer.worker.requests import Progress

    status = window.status
    status.set_busy(True)
    status.show_progress(Progress(SimpleNamespace(kind="mlp-activations"), 0, 1, "MLP activations of layer 0…"))
    assert status.currentMessage() == "MLP activations of layer 0…"
    status.set_busy(False)
    assert status.currentMessage() == ""
    status.set_busy(True)
    status.show_progress(Progress(SimpleNamespace(kind="trace"), 0, 1, "running…"))
    status.showMessage("a warning the user should read", 10000)
    status.set_busy(False)
    assert status.currentMessage() == "a warning the user should read"


def test_status_bar_shows_model_params_device_and_time(window):
    s = window.status
    assert "tiny.safetensors" in s.model_label.text()
    assert "params" in s.params_label.text() and "2 layers" in s.params_label.text()
    # "forward 12.5 ms", or with the clock time when the run waited ("forward 12.5 ms, 136 ms on the clock")
    assert re.fullmatch(r"forward \d+\.\d ms(, \d+ ms on the clock)?( \(.+\))?", s.forward_label.text())


def test_token_tooltip_and_colour_modes(qtbot, window):
    st, strip = window.state, window.token_strip
    trace = st.trace
    text = strip.tooltip_text(3)
    assert f"id {int(trace.token_ids[3])}" in text and "position 3" in text
    assert f"p = {np.exp(float(trace.token_logprobs[3])):.4g}" in text
    assert "nothing to predict" in strip.tooltip_text(0)
    strip.set_mode("surprisal")
    from transformer_viewer.viewer.views.token_strip import chip_values

    values, legend = chip_values(st, "surprisal")
    np.testing.assert_allclose(values[1:], -trace.token_logprobs[1:])
    assert "surprisal" in legend
    values, _ = chip_values(st, "attention")
    q = st.query_index
    ref_session = reference_session(st.model_info.source, trace.text)
    ref = ref_session.run()
    np.testing.assert_allclose(values[: q + 1], ref.attention[st.layer, st.head, q, : q + 1].astype(np.float32))
    st.set_neuron(5)
    assert strip.mode == "neuron"
    # A trace keeps per-neuron summaries; choosing a neuron fetches the layer's activations.
    wait_idle(qtbot, window, lambda: st.layer_activations(trace, st.layer) is not None)
    values, legend = chip_values(st, "neuron")
    np.testing.assert_allclose(values, mlp_activations(ref_session, ref, st.layer)[:, 5], rtol=1e-6, atol=1e-6)
    assert "neuron 5" in legend


def test_examples_menu_runs_an_example(qtbot, window):
    actions = window.actions_.examples_menu.actions()
    if not actions:
        pytest.skip("no example prompts installed")
    actions[0].trigger()
    text = window_actions.example_prompts()[0].text
    assert window.prompt_editor.text() == text
    wait_idle(qtbot, window, lambda: window.state.trace.text.endswith(text[-20:]))


def test_keystrokes_not_yet_run_win_over_a_prompt_set_elsewhere(qtbot, window):
    """A continuation that lands while the user types (the debounce still waiting) does not
    replace what they typed; an example chosen from the menu does, as the user asked."""
    editor = window.prompt_editor
    qtbot.keyClicks(editor.edit, "typed ")  # runs after the debounce
    typed = editor.text()
    assert editor.editing() and "typed" in typed and typed != PROMPT
    window.state.set_prompt(PROMPT + " and a generated continuation")  # what Continue's result does
    assert editor.text() == typed
    wait_idle(qtbot, window, lambda: window.state.trace.text == typed)
    assert window.state.prompt == typed
    actions = window.actions_.examples_menu.actions()
    if actions:
        qtbot.keyClicks(editor.edit, " more")
        actions[0].trigger()
        text = window_actions.example_prompts()[0].text
        assert editor.text() == window.state.prompt == text and not editor.editing()


def test_close_stops_the_worker_thread(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    thread = w.worker.thread
    assert thread.isRunning()
    w.close()
    assert thread.isFinished()


def test_no_bundled_model_opens_empty_with_a_message(qtbot, tmp_path, monkeypatch):
    from transformer_viewer.viewer.worker import handlers

    monkeypatch.setattr(handlers, "bundled_checkpoint_path", lambda: str(tmp_path / "nope.safetensors"))
    w = new_window(qtbot, tmp_path, None)
    w.load(None)
    wait_idle(qtbot, w, lambda: w.last_error is not None)
    assert "bundled model is not installed" in w.status.currentMessage()
    assert w.state.model_info is None and (w._error_box is None or not w._error_box.isVisible())
    w.close()


def test_a_cancelled_log_probability_pass_says_how_to_finish_it(qtbot, window):
    import dataclasses

    from transformer_viewer.viewer.views.token_strip import STOPPED
    from transformer_viewer.viewer.worker.requests import Failure, LogprobsRequest

    st, strip = window.state, window.token_strip
    strip.set_mode("surprisal")
    pending = dataclasses.replace(st.trace, token_logprobs=None)  # the views landed, the second pass not yet
    st.set_traces(pending, pending)
    assert "computing" in strip.legend.text() and "still being computed" in strip.tooltip_text(2)
    window.worker.failed.emit(Failure(LogprobsRequest(text=st.prompt), "cancelled", cancelled=True))  # Cancel
    assert strip.legend.text() == STOPPED and "stopped" in strip.tooltip_text(2)

    window.run_prompt(st.prompt)  # Ctrl+Enter: the same prompt, its log-probabilities computed again
    assert "computing" in strip.legend.text()  # the worker is busy again: no longer "stopped"
    wait_idle(qtbot, window, lambda: st.trace is not None and st.trace.token_logprobs is not None)
    assert strip.legend.text().startswith("surprisal -log p(token)")
