"""The patching view: a grid from the worker drawn as a diverging heatmap (normalised or raw), a
click that selects the cell's layer, head and position everywhere, prompts of different lengths,
answers it no longer wants dropped, cancel within one batch, a new prompt superseding a job, and
feature clamps applied to both runs (a change of them patches again)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6 import QtCore

from tests.helpers.held_worker import HeldWorker, state_with_trace
from tests.helpers.window import new_window, reference_session, wait_idle
from transformer_viewer.model.analysis.patching.exact import patch_grid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.errors import Cancelled
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer

VIEW_ID = "patching"
CLEAN = "When Mary and John went to the store, John gave a drink to"
SWAPPED = "When Mary and John went to the store, Mary gave a drink to"


def _ids(*texts: str) -> tuple[int, ...]:
    tok = Tokenizer()
    return tuple(tok.encode(t)[0] for t in texts)


def _reference(ckpt: str, clean: str, corrupted: str, what: str, **kw):
    session = reference_session(ckpt, clean)
    session.set_corrupted(corrupted)
    return patch_grid(session, what, PatchMetric.make("logit-diff", _ids(" Mary", " John")), **kw)


def _window_comparing(qtbot, tmp_path, ckpt, what: str = "heads", corrupted: str = SWAPPED):
    w = new_window(qtbot, tmp_path, ckpt, prompt=CLEAN)
    w.state.set_patching(what=what, tokens=_ids(" Mary", " John"))
    w.views["corrupted-prompt"].set_text(corrupted)
    w.show_view(VIEW_ID)
    return w, w.views[VIEW_ID]


def test_the_view_draws_the_workers_grid_and_a_click_selects_everywhere(qtbot, tmp_path, tiny_ckpt):
    w, view = _window_comparing(qtbot, tmp_path, tiny_ckpt, what="heads")
    try:
        wait_idle(qtbot, w, lambda: view.exact is not None)
        want = _reference(tiny_ckpt, CLEAN, SWAPPED, "heads")
        np.testing.assert_allclose(view.exact.raw, want.raw, rtol=1e-5, atol=1e-5)
        assert (view.exact.clean, view.exact.corrupted) == pytest.approx((want.clean, want.corrupted), abs=1e-5)
        assert np.isfinite(view.exact.raw).all() and np.ptp(view.exact.raw) > 0  # heads differ
        np.testing.assert_allclose(view.heatmap.matrix(), want.normalised, rtol=1e-4, atol=1e-5)
        lo, hi = view.heatmap.levels()
        assert lo == pytest.approx(-hi)  # diverging, centred on 0
        assert view.heatmap.row_labels() == want.rows and view.heatmap.col_labels() == want.cols
        title = view.title()
        assert "logit(" in title and "corrupted = 0, clean = 1" in title and "Mary" in title
        assert "clean" in view.notes.text() and "no heads masked" in view.notes.text()
        view.controls.normalised.setChecked(False)  # raw values, same grid
        np.testing.assert_allclose(view.heatmap.matrix(), want.raw, rtol=1e-5, atol=1e-5)
        assert "raw metric" in view.title()
        QtCore.QCoreApplication.processEvents()
        # A real click on cell (layer 1, head 2) selects that head in every view.
        pos = view.heatmap.graphics.mapFromScene(view.heatmap.cell_scene_pos(1, 2))
        qtbot.mouseClick(view.heatmap.graphics.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=pos)
        assert (w.state.layer, w.state.head) == (1, 2)
        assert w.head_grid.selected() == (1, 2)
        assert view.readout.text().startswith("layer 1 \u00d7 head 2: exact")
    finally:
        w.close()


def test_heads_by_position_selects_the_position_and_different_lengths_still_patch_heads(qtbot, tmp_path, tiny_ckpt):
    longer = SWAPPED.replace("the store", "the big store")
    w, view = _window_comparing(qtbot, tmp_path, tiny_ckpt, what="heads", corrupted=longer)
    try:
        wait_idle(qtbot, w, lambda: view.exact is not None)
        np.testing.assert_allclose(view.exact.raw, _reference(tiny_ckpt, CLEAN, longer, "heads").raw,
                                   rtol=1e-5, atol=1e-5)
        w.state.set_patching(what="resid")  # by position: one line instead of a grid
        wait_idle(qtbot, w)
        assert view.exact is None and "needs equal lengths" in view.info.text()
        assert "needs equal lengths" in view.cover.message()
        w.views["corrupted-prompt"].set_text(SWAPPED)
        w.state.set_patching(what="heads-by-pos", layer=1)
        wait_idle(qtbot, w, lambda: view.exact is not None)
        want = _reference(tiny_ckpt, CLEAN, SWAPPED, "heads-by-pos", layer=1)
        np.testing.assert_allclose(view.exact.raw, want.raw, rtol=1e-5, atol=1e-5)
        view.click(3, 5)
        assert (w.state.layer, w.state.head, w.state.query) == (1, 3, 5)
    finally:
        w.close()


def test_a_late_answer_is_dropped_and_a_stop_says_so(qtbot, tiny_ckpt):
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.viewer.views.patching_view import PatchingView
    from transformer_viewer.viewer.worker.handlers import WorkerSession
    from transformer_viewer.viewer.worker.requests import Failure

    session = WorkerSession(load_checkpoint(tiny_ckpt, device="cpu"))
    st = state_with_trace(session, CLEAN)
    st.set_patching(comparing=True, corrupted=SWAPPED, tokens=_ids(" Mary", " John"), what="heads")
    worker = HeldWorker(session)
    view = PatchingView(st, worker)
    qtbot.addWidget(view)
    view.show()
    first = worker.of_kind("patching")[-1]
    st.set_patching(what="mlp")
    second = worker.of_kind("patching")[-1]
    assert (first.request.what, second.request.what) == ("heads", "mlp")
    worker.answer(first)
    assert view.exact is None and view.estimate is None and view.dropped == 1
    worker.answer(second)  # the estimate first (mlp has one), which asks for the exact grid
    assert view.estimate is not None and view.exact is None
    third = worker.of_kind("patching")[-1]
    assert third.request.what == "mlp" and not third.request.estimate
    worker.answer(third)
    assert view.exact is not None and view.exact.what == "mlp"
    st.set_patching(direction="noise")
    fourth = worker.of_kind("patching")[-1]
    fourth.on_failure(Failure(fourth.request, "cancelled", cancelled=True))
    assert "stopped" in view.info.text()
    st.set_patching(direction="denoise")  # asks again
    assert worker.of_kind("patching")[-1].request.direction == "denoise"


def test_a_patching_job_stops_within_one_batch(monkeypatch, tiny_ckpt):
    from transformer_viewer.model.capture.memory_budget import patch_batch_size, patch_sources_bytes
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.viewer.worker import handlers
    from transformer_viewer.viewer.worker.handlers import WorkerSession
    from transformer_viewer.viewer.worker.patching import PatchRequest, handle_patch

    monkeypatch.setattr(handlers, "PROGRESS_AFTER_S", 0.0)
    session = WorkerSession(load_checkpoint(tiny_ckpt, device="cpu"))
    T = len(session.tokenizer.encode(CLEAN))
    # Room for the runs and both prompts' head outputs, and a few patched runs a batch.
    session.memory_budget = session.estimate_bytes(T) + 2 * patch_sources_bytes(session.config, T, {"z"})
    batch = patch_batch_size(session.config, T, session.memory_budget)
    total = session.config.n_layer * session.config.n_head
    assert batch < total
    request = PatchRequest(text=CLEAN, corrupted=SWAPPED, what="heads",
                           metric=PatchMetric.make("logit-diff", _ids(" Mary", " John")))
    steps = []
    with pytest.raises(Cancelled):
        handle_patch(session, request, lambda done, total, text="": steps.append((done, total)),
                     lambda: bool(steps))
    assert steps == [(batch, total)]


def test_the_estimate_of_heads_by_position_is_the_chosen_layers(tiny_ckpt):
    from transformer_viewer.model.analysis.patching.attribution_patching import estimate_grid
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.viewer.worker.handlers import WorkerSession
    from transformer_viewer.viewer.worker.patching import PatchRequest, handle_patch

    session = WorkerSession(load_checkpoint(tiny_ckpt, device="cpu"))
    metric = PatchMetric.make("logit-diff", _ids(" Mary", " John"))
    request = PatchRequest(text=CLEAN, corrupted=SWAPPED, what="heads-by-pos", layer=1, estimate=True, metric=metric)
    grid = handle_patch(session, request, lambda *a, **k: None, lambda: False).grid
    assert grid.estimate and grid.raw.shape[0] == session.config.n_head  # one layer's heads, as the exact grid
    np.testing.assert_array_equal(grid.raw, estimate_grid(session, "heads-by-pos", metric, layer=1).raw)


def test_a_new_prompt_supersedes_a_running_grid(qtbot, tmp_path, tiny_ckpt):
    w, view = _window_comparing(qtbot, tmp_path, tiny_ckpt, what="heads")
    try:
        newer = CLEAN.replace("store", "house")
        w.run_prompt(newer)  # at once, while the grid of the first prompt is asked for
        wait_idle(qtbot, w, lambda: view.exact is not None and view.prompts[0] == newer)
        np.testing.assert_allclose(view.exact.raw, _reference(tiny_ckpt, newer, SWAPPED, "heads").raw,
                                   rtol=1e-5, atol=1e-5)
    finally:
        w.close()


def test_the_estimate_comes_first_and_a_click_reads_the_exact_patch_beside_it(qtbot, tmp_path, tiny_ckpt):
    from transformer_viewer.model.analysis.patching.attribution_patching import estimate_grid

    w, view = _window_comparing(qtbot, tmp_path, tiny_ckpt, what="heads")
    try:
        wait_idle(qtbot, w, lambda: view.exact is not None)
        session = reference_session(tiny_ckpt, CLEAN)
        session.set_corrupted(SWAPPED)
        metric = PatchMetric.make("logit-diff", _ids(" Mary", " John"))
        np.testing.assert_allclose(view.estimate.raw, estimate_grid(session, "heads", metric).raw,
                                   rtol=1e-4, atol=1e-5)
        assert view.estimate.estimate and not view.exact.estimate
        assert view.shown_grid() is view.exact  # the exact grid replaces the estimate once there
        view.show_estimate.setChecked(True)
        assert view.shown_grid() is view.estimate and "estimate" in view.heatmap.title()
        assert "first-order estimate" in view.notes.text()
        view.click(1, 3)
        line = view.readout.text()
        assert "exact" in line and "estimate" in line
        assert f"{float(view.exact.raw[1, 3]):.4g} raw" in line and f"{float(view.estimate.raw[1, 3]):.4g} raw" in line
        # KL from the clean run, noising: the gradient is zero at the clean run, and the view says so.
        w.state.set_patching(metric="kl", direction="noise")
        wait_idle(qtbot, w, lambda: view.exact is not None and view.exact.direction == "noise")
        est = view.estimate  # noising patches the clean run: every cell estimates the clean run's own KL, 0
        np.testing.assert_allclose(est.raw, est.clean, atol=1e-6)
        view.show_estimate.setChecked(True)
        view.draw()
        assert "zero everywhere" in view.notes.text()
    finally:
        w.close()


def test_a_long_prompt_gets_the_estimate_and_exact_cells_on_click(qtbot, tmp_path, tiny_ckpt, monkeypatch):
    from transformer_viewer.model.analysis.patching import exact

    monkeypatch.setattr(exact, "EXACT_GRID_MAX_TOKENS", 4)  # the prompt is longer than this
    w, view = _window_comparing(qtbot, tmp_path, tiny_ckpt, what="resid")
    try:
        wait_idle(qtbot, w, lambda: view.estimate is not None)
        assert view.exact is None and view.long_prompt()
        assert "click a cell for its exact patch" in view.notes.text()
        want = _reference(tiny_ckpt, CLEAN, SWAPPED, "resid")
        view.click(1, 9)
        wait_idle(qtbot, w, lambda: view.cells)
        assert set(view.cells) == {(1, 9)}
        assert view.cells[(1, 9)] == pytest.approx(float(want.raw[1, 9]), rel=1e-5, abs=1e-5)
        assert (w.state.layer, w.state.query) == (1, 9)
        view.click(2, 11, region=True)  # every cell from the last click to this one
        wait_idle(qtbot, w, lambda: len(view.cells) == 6)
        assert set(view.cells) == {(r, c) for r in (1, 2) for c in (9, 10, 11)}
        got = view.exact_grid()
        for r, c in view.cells:
            assert got.raw[r, c] == pytest.approx(float(want.raw[r, c]), rel=1e-5, abs=1e-5)
        assert np.isnan(got.raw[0, 0])
        assert "exact" in view.readout.text() and "estimate" in view.readout.text()
    finally:
        w.close()


def test_path_patching_into_the_chosen_receiver(qtbot, tmp_path, tiny_ckpt):
    from transformer_viewer.model.analysis.patching.path_patching import path_patch_grid

    w, view = _window_comparing(qtbot, tmp_path, tiny_ckpt, what="heads")
    try:
        w.state.set_patching(what="path", receiver=(1, 2), input="k")
        controls = view.controls
        assert controls.receiver_layer.isVisibleTo(controls) and not controls.layer.isVisibleTo(controls)
        wait_idle(qtbot, w, lambda: view.exact is not None and view.exact.what == "path")
        session = reference_session(tiny_ckpt, CLEAN)
        session.set_corrupted(SWAPPED)
        want = path_patch_grid(session, (1, 2), "k", PatchMetric.make("logit-diff", _ids(" Mary", " John")))
        np.testing.assert_allclose(view.exact.raw, want.raw, rtol=1e-5, atol=1e-5)
        assert view.estimate is None  # path patching has no estimate
        view.click(0, 3)
        assert (w.state.layer, w.state.head) == (0, 3)
    finally:
        w.close()


def test_key_value_heads_of_a_grouped_query_model(qtbot, tmp_path):
    from tests.helpers.window import make_checkpoint

    ckpt = make_checkpoint(tmp_path / "gqa.safetensors", n_kv_head=2)  # 4 query heads, 2 per key/value head
    w, view = _window_comparing(qtbot, tmp_path, ckpt, what="k")
    try:
        wait_idle(qtbot, w, lambda: view.exact is not None)
        want = _reference(ckpt, CLEAN, SWAPPED, "k")
        np.testing.assert_allclose(view.exact.raw, want.raw, rtol=1e-5, atol=1e-5)
        assert view.exact.raw.shape == (2, 2) and view.heatmap.col_labels() == ("0", "1")
        assert "key/value head" in view.heatmap.hover_text(0, 1)
        assert "2 query heads share each key/value head" in view.notes.text()
        view.click(1, 1)  # key/value head 1 is query heads 2 and 3: the first of them is selected
        assert (w.state.layer, w.state.head) == (1, 2)
    finally:
        w.close()


def test_feature_clamps_apply_to_both_runs_and_a_change_of_them_patches_again(qtbot, tmp_path, tiny_ckpt,
                                                                              sae_folder):
    from tests.helpers.sae_window import close, opened, reference
    from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention

    w, view = _window_comparing(qtbot, tmp_path, tiny_ckpt, what="resid")
    try:
        sae = opened(qtbot, w, sae_folder)
        wait_idle(qtbot, w, lambda: view.exact is not None)
        plain = view.exact
        clamps = (FeatureClamp(sae.index, 5, "scale", 3.0), FeatureClamp(sae.index, 9, "set", 2.5, 11))
        w.state.set_clamps(clamps)
        wait_idle(qtbot, w, lambda: view.exact is not None and view.exact is not plain)
        session = reference(tiny_ckpt, sae_folder)
        session.set_prompt(CLEAN)
        session.set_corrupted(SWAPPED)
        want = patch_grid(session, "resid", PatchMetric.make("logit-diff", _ids(" Mary", " John")),
                          intervention=Intervention.make(session.config, clamps=clamps))
        close(view.exact.raw, want.raw, "the resid grid under clamps")
        assert np.abs(want.raw - plain.raw).max() > 1e-3  # the clamps change the grid
        assert "under 2 feature clamps" in view.heatmap.plot.titleLabel.text
        assert "2 feature clamps apply to both runs" in view.notes.text()
        w.state.set_clamps(())  # the clamps gone: the grid without them again
        wait_idle(qtbot, w, lambda: view.exact is not None and "clamp" not in view.notes.text())
        np.testing.assert_allclose(view.exact.raw, plain.raw, rtol=1e-5, atol=1e-5)
        assert "feature clamp" not in view.heatmap.plot.titleLabel.text
    finally:
        w.close()
