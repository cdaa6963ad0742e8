"""The views at the sizes current models have: an 8k-token residual stream, a 200k-token
vocabulary, a 32 x 32-head mask grid, a scan's ranked heads, and a long prompt's logit lens
over a window of positions (checked against the lens of every position)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt

from tests.helpers.fake_traces import fake_next, fake_state, fake_trace
from tests.helpers.interventions import ablating
from tests.helpers.models import scaled_init_loaded
from transformer_viewer.model.analysis.lens import logit_lens
from transformer_viewer.model.decoder.config import GPTConfig


def test_residual_view_at_8k_tokens_pools_and_exports_full_resolution(qtbot):
    from transformer_viewer.viewer.views.residual_view import ResidualView

    state = fake_state(n_tokens=8192, n_layer=4, n_head=8)
    trace = state.trace
    trace.resid_norms[3, 5000] = 99.0
    trace.head_norms[0, 6, 7001] = 42.0
    view = ResidualView(state)
    qtbot.addWidget(view)
    np.testing.assert_array_equal(view.matrix(), trace.resid_norms)  # what export writes
    assert view.col_labels() == trace.labels
    shown = view.norms.matrix()
    assert shown.shape == (10, 1024)
    np.testing.assert_array_equal(shown.max(axis=1), trace.resid_norms.max(axis=1))
    assert view.heads.matrix().shape == (8, 1024) and view.heads.matrix()[6].max() == 42.0
    view.heads.cell_clicked.emit(6, int(np.argmax(view.heads.matrix()[6])))
    assert (state.head, state.query_index) == (6, 7001)
    view.norms.cell_clicked.emit(3, 5000 // 8)
    assert state.query_index == 5000


def test_next_token_panel_with_a_200k_vocabulary(qtbot):
    from transformer_viewer.viewer.views.logits_panel import LogitsPanel, compare

    V = 200_000
    state = fake_state(n_tokens=16, n_vocab=V)
    clean = state.trace
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 2] = True
    masked = fake_trace(16, n_vocab=V, mask=mask, seed=1)
    masked = type(masked)(**{**masked.__dict__, "next": fake_next(V, 15, seed=1)})
    state.set_mask(mask)
    panel = LogitsPanel(state)
    qtbot.addWidget(panel)
    state.set_traces(masked, clean)
    rows = panel.rows()
    assert len(rows) == 10
    ids = clean.next.top_ids
    assert ids.max() > 50257  # ids past GPT-2's vocabulary still get a label
    labels = [panel.table.item(r, 1).text() for r in range(10)]
    assert all(labels) and f"<{int(ids[np.argmax(ids)])}>" in labels
    want = compare(clean.next, masked.next)
    assert panel.comparison == want and 1 <= want.new_rank <= V and want.kl > 0
    first = panel.comparison
    state.set_selection(query=3)  # a redraw for the same distributions reuses the comparison
    panel.refresh()
    assert panel.comparison is first


def test_mask_grid_at_32_by_32_scrolls_and_toggles(qtbot):
    from tests.helpers.fake_traces import fake_info
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.views.mask_grid import MaskGrid

    state = ViewerState()
    state.set_model(fake_info(32, 32, 128, 50257))
    grid = MaskGrid(state)
    qtbot.addWidget(grid)
    grid.resize(260, 300)
    grid.show()
    qtbot.waitExposed(grid)
    canvas = grid.canvas
    assert canvas.width() > grid.scroll.viewport().width()  # smaller than the grid: it scrolls

    def center(layer, head):
        left, top = canvas._margins()
        c = canvas._cell()
        return QPointF(left + (head + 0.5) * c, top + (layer + 0.5) * c).toPoint()

    assert canvas._cell() >= canvas.min_cell
    grid.scroll.ensureVisible(center(31, 31).x(), center(31, 31).y())
    qtbot.mouseClick(canvas, Qt.LeftButton, pos=center(31, 31))
    assert state.mask[31, 31] and state.mask.sum() == 1 and (state.layer, state.head) == (31, 31)
    qtbot.mousePress(canvas, Qt.LeftButton, pos=center(20, 3))
    for head in range(4, 12):
        qtbot.mouseMove(canvas, pos=center(20, head))
    qtbot.mouseRelease(canvas, Qt.LeftButton, pos=center(20, 11))
    assert state.mask[20, 3:12].all() and state.mask.sum() == 10
    qtbot.mouseClick(canvas, Qt.LeftButton, pos=center(31, 31))
    assert not state.mask[31, 31]
    before = canvas.minimumWidth()
    canvas.set_min_cell(canvas.min_cell * 2)
    assert canvas.minimumWidth() > before
    canvas.set_min_cell(1.0)  # zoomed out as far as it goes: cells stay at least a few pixels
    assert canvas.min_cell >= 4.0 and "9 of 1024" in grid.count.text()


def test_scan_view_lists_its_most_important_heads(qtbot):
    from transformer_viewer.model.analysis.scan import ScanResult
    from transformer_viewer.viewer.views.scan_view import RANKED, ScanView

    state = fake_state(n_layer=32, n_head=32)
    rng = np.random.default_rng(0)
    effect = rng.standard_normal((32, 32)).astype(np.float32)
    done = np.ones((32, 32), dtype=bool)
    result = ScanResult(position=3, target_id=5, distractor_id=None, metric="logprob", ablation="zero",
                        base_mask=np.zeros((32, 32), bool), baseline_metric=-1.0, baseline_target_prob=0.3,
                        metric_values=effect - 1.0, effect=effect, kl=np.abs(effect), target_probs=np.full((32, 32), 0.2,
                                                                                                      np.float32),
                        done=done, cancelled=False)
    view = ScanView(state)
    qtbot.addWidget(view)
    view.set_result(result)
    heads = view.ranked_heads()
    assert len(heads) == RANKED and heads == result.ranked("effect")[:RANKED]
    assert effect[heads[0]] == effect.min()
    view._on_ranked_click(1, 0)
    assert (state.layer, state.head) == heads[1]


@pytest.fixture()
def long_session():
    from transformer_viewer.viewer.worker.handlers import WorkerSession

    config = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=128, vocab_size=50257)
    session = WorkerSession(scaled_init_loaded(config=config, seed=2))
    prompt = " ".join(["the cat sat on the mat and the dog barked"] * 9)
    return session, prompt


def test_a_lens_window_is_the_slice_of_the_lens_of_every_position(long_session, monkeypatch):
    from transformer_viewer.model.analysis import lens_unembed

    session, prompt = long_session
    session.set_prompt(prompt)
    session.run()
    full = logit_lens(session)
    monkeypatch.setattr(lens_unembed, "ROW_BLOCK", 7)  # windows that split into uneven blocks
    monkeypatch.setattr(lens_unembed, "VOCAB_BLOCK", 5000)
    part = logit_lens(session, positions=(30, 75))
    for name in ("top_ids", "final_ranks"):
        np.testing.assert_array_equal(getattr(part, name), getattr(full, name)[:, 30:75])
    for name in ("top_probs", "final_probs"):  # log-sum-exp summed over other vocabulary blocks
        np.testing.assert_allclose(getattr(part, name), getattr(full, name)[:, 30:75], rtol=1e-5)


def test_lens_view_shows_a_window_around_the_selection(qtbot, long_session, monkeypatch):
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.views import lens_view
    from transformer_viewer.viewer.worker.inline import InlineWorker
    from transformer_viewer.viewer.worker.requests import TraceRequest

    monkeypatch.setattr(lens_view, "WINDOW", 32)
    session, prompt = long_session
    worker = InlineWorker(session)
    state = ViewerState()
    state.set_model(session.info())
    state.set_prompt(prompt)
    got = []
    worker.submit(TraceRequest(text=prompt), on_result=got.append)
    state.set_traces(got[0].value.trace, got[0].value.clean)
    T = state.trace.n_tokens
    assert T > 64
    view = lens_view.LensView(state, worker)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    full = logit_lens(session)
    r = view._current()
    assert r is not None and r.start == T - 32 and r.lens.n_tokens == 32  # the last token: the window ends at the prompt's end
    # the log-sum-exp runs over vocabulary blocks as wide as the row count allows: float32 rounding
    np.testing.assert_allclose(view.matrix(), full.top_probs[:, r.start:], rtol=1e-5)
    state.set_selection(query=5)  # out of the window: the lens around it
    r = view._current()
    assert r is not None and r.start == 0 and view.matrix().shape == (3, 32)
    np.testing.assert_allclose(view.matrix(), full.top_probs[:, :32], rtol=1e-5)
    assert view.table.item(2, 1).text() == state.tokenizer().label(int(full.top_ids[2, 5]))
    view.heatmap.cell_clicked.emit(0, 20)
    assert state.query_index == view.position_of_column(20) == 20


def test_the_lens_request_reports_rows_and_stops_when_cancelled(long_session):
    from transformer_viewer.viewer.worker.lens import LensRequest, handle_lens
    from transformer_viewer.viewer.worker.requests import Cancelled

    session, prompt = long_session
    mask = np.zeros((2, 4), dtype=bool)
    mask[0, 3] = True
    seen = []
    r = handle_lens(session, LensRequest(text=prompt, intervention=ablating(mask), window=(10, 40)), lambda *a: seen.append(a[:2]),
                    lambda: False)
    assert (r.start, r.n_tokens, r.lens.n_tokens) == (10, len(session.tokens.ids), 30)
    done = [d for d, _total in seen]
    assert seen[-1] == (6, 6) and done == sorted(done) and 3 in done  # 3 rows clean, then 3 masked
    with pytest.raises(Cancelled):
        handle_lens(session, LensRequest(text=prompt, intervention=ablating(mask), window=(0, 20)), lambda *a: None, lambda: True)


@pytest.mark.parametrize("layer", [0, 1])
def test_the_lens_request_lends_clean_rows_and_answers_as_a_full_masked_lens(long_session, layer):
    from transformer_viewer.viewer.worker.lens import LensRequest, handle_lens

    session, prompt = long_session
    mask = np.zeros((2, 4), dtype=bool)
    mask[layer, :3] = True
    window = (20, 60)
    r = handle_lens(session, LensRequest(text=prompt, intervention=ablating(mask), window=window), lambda *a: None, lambda: False)
    clean = logit_lens(session, session.masked_residuals(), positions=window)
    full = logit_lens(session, session.masked_residuals(mask), reference_ids=clean.top_ids, positions=window)
    for name in ("top_ids", "final_ranks", "reference_ids"):
        np.testing.assert_array_equal(getattr(r.lens, name), getattr(full, name), err_msg=name)
    for name in ("top_probs", "final_probs", "reference_probs"):
        np.testing.assert_allclose(getattr(r.lens, name), getattr(full, name), rtol=1e-5, atol=1e-7, err_msg=name)
    assert not r.diff[: layer + 1].any() and r.diff[layer + 1:].any()  # rows up to the masked layer: the clean ones


def test_a_moved_lens_window_computes_only_its_new_positions(long_session, monkeypatch):
    from transformer_viewer.model.analysis import lens as lens_module
    from transformer_viewer.viewer.worker.lens import LensRequest, handle_lens

    session, prompt = long_session
    asked = []
    real = lens_module.logit_lens
    monkeypatch.setattr(lens_module, "logit_lens", lambda *a, **k: asked.append(k["positions"]) or real(*a, **k))
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 2] = True

    def lens(window, m=None):
        return handle_lens(session, LensRequest(text=prompt, intervention=ablating(m), window=window), lambda *a: None, lambda: False)

    lens((10, 40), mask)
    assert asked == [(10, 40), (10, 40)]  # clean, then masked
    asked.clear()
    right, left = lens((25, 55), mask), lens((5, 35), mask)
    assert asked == [(40, 55), (40, 55), (5, 25), (5, 25)]  # only the positions the window had not covered
    asked.clear()
    inside = lens((10, 30))  # inside the last window, unmasked: nothing to compute
    assert asked == [] and inside.start == 10 and inside.lens.n_tokens == 20
    lens((5, 35))  # the window it was cut from is still kept
    assert asked == []
    clean = real(session, session.masked_residuals(), positions=(25, 55))
    full = real(session, session.masked_residuals(mask), reference_ids=clean.top_ids, positions=(25, 55))
    for got, want in ((right.clean, clean), (right.lens, full), (left.lens.columns(20, 30), full.columns(0, 10))):
        for name in ("top_ids", "final_ids", "final_ranks", "reference_ids"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        for name in ("top_probs", "final_probs", "reference_probs"):
            np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-5, atol=1e-7, err_msg=name)


def test_lens_windows_follow_the_cost_and_hold_the_query():
    from transformer_viewer.viewer.views.lens_view import (
        LENS_BUDGET,
        LOGIT_WORK,
        MIN_WINDOW,
        WINDOW,
        lens_window,
        window_size,
    )

    assert window_size(13, 50257, 768) == WINDOW  # GPT-2-small: the whole budget
    assert window_size(3, 1000, 32) == WINDOW  # a tiny model: never more than WINDOW
    qwen = window_size(25, 151936, 896)  # Qwen2-0.5B's shape: 24 layers, 152k vocabulary, width 896
    assert MIN_WINDOW < qwen < 64
    per_position = 25 * 151936 * (896 + LOGIT_WORK)
    assert qwen * per_position <= LENS_BUDGET < (qwen + 1) * per_position
    assert window_size(27, 262144, 1152) == MIN_WINDOW  # a 262k vocabulary at width 1152: the floor
    # the cost is rows x vocabulary x (width + the reductions): doubling rows or vocabulary
    # halves the window; a narrow model's window shrinks less than its width, by the reductions
    smol = window_size(31, 49152, 576)
    assert window_size(31, 2 * 49152, 576) == window_size(62, 49152, 576) == smol // 2  # (floors)
    narrow, wide = window_size(29, 151936, 256), window_size(29, 151936, 896)
    assert wide < narrow < wide * 896 // 256
    sizes = [window_size(r, 151936, 896) for r in range(2, 60)]
    assert sizes == sorted(sizes, reverse=True) and min(sizes) >= MIN_WINDOW and max(sizes) <= WINDOW
    assert lens_window(100, 50, 256) == (0, 100)
    for q in (0, 10, 4000, 8191):
        a, b = lens_window(8192, q, 37)
        assert b - a == 37 and a <= q < b and 0 <= a and b <= 8192
