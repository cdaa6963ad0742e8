"""The rollout view: draws model/analysis/rollout.py's rows for the chosen layers, heads and residual
term, a block of query rows at a time, keeps each block it got, colours the token strip by the
selected query's row while shown, selects a query on click, exports, and drops answers it no
longer wants."""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore

from tests.helpers.cli import cli
from tests.helpers.held_worker import HeldWorker, state_with_trace
from tests.helpers.window import PROMPT, reference_session, shown_view, wait_idle
from transformer_viewer.model.analysis.rollout import rollout_rows

VIEW_ID = "rollout"


def test_the_window_view_draws_the_rows_of_the_chosen_range(qtbot, tmp_path, tiny_ckpt):
    with shown_view(qtbot, tmp_path, tiny_ckpt, VIEW_ID) as (w, view):
        ref = reference_session(tiny_ckpt)
        T = w.state.trace.n_tokens
        np.testing.assert_allclose(view.matrix(), rollout_rows(ref, 0, T).rows, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.state.token_overlay[0], view.matrix()[T - 1])  # the selected (last) query
        assert "rollout from" in w.views["tokens"].legend.text()
        view.set_options(layers=(1, 2), heads="max", residual=False)
        wait_idle(qtbot, w, lambda: view.result.layers == (1, 2) and not view.result.residual)
        np.testing.assert_allclose(view.matrix(), rollout_rows(ref, 0, T, layers=(1, 2), heads="max",
                                                               residual=False).rows, rtol=1e-5, atol=1e-6)
        kept = len(view.cache)
        view.set_options(layers=(0, 2), heads="mean", residual=True)  # asked before: from the cache, at once
        assert view.result.layers == (0, 2) and view.result.residual and len(view.cache) == kept
        hm = view.heatmap
        QtCore.QCoreApplication.processEvents()
        qtbot.mouseClick(hm.graphics.viewport(), QtCore.Qt.MouseButton.LeftButton,
                         pos=hm.graphics.mapFromScene(hm.cell_scene_pos(3, 1)))
        assert w.state.query_index == 3 and hm.highlighted_row() == 3
        np.testing.assert_allclose(w.state.token_overlay[0], view.matrix()[3])
        w.show_view("attention")
        assert w.state.token_overlay is None


def test_a_chosen_subset_of_heads_and_a_bad_choice(qtbot, tmp_path, tiny_ckpt):
    with shown_view(qtbot, tmp_path, tiny_ckpt, VIEW_ID) as (w, view):
        ref = reference_session(tiny_ckpt)
        T = w.state.trace.n_tokens
        view.set_options(layers=(0, 2), heads=[(1, 0), (0, 1)])
        assert view.chosen.isVisible() and view.chosen.text() == "1.0, 0.1"
        wait_idle(qtbot, w, lambda: view.result.heads == "0.1,1.0")
        np.testing.assert_allclose(view.matrix(), rollout_rows(ref, 0, T, heads=[(0, 1), (1, 0)]).rows,
                                   rtol=1e-5, atol=1e-6)
        view.chosen.setText("9.9")  # no such head: one line, nothing asked
        view.chosen.editingFinished.emit()
        assert "layer.head" in view.info.text() and view.result.heads == "0.1,1.0"
        view.heads.setCurrentIndex(0)  # back to the mean
        assert not view.chosen.isVisible()


def test_blocks_of_rows_a_late_answer_dropped(qtbot, tiny_ckpt, monkeypatch):
    """Blocks of rows around the selected query, never the whole product; an answer for a block
    or range no longer wanted is not drawn."""
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.viewer.views import rollout_view
    from transformer_viewer.viewer.worker.handlers import WorkerSession

    monkeypatch.setattr(rollout_view, "BLOCK_ROWS", 4)
    session = WorkerSession(load_checkpoint(tiny_ckpt, device="cpu"))
    st = state_with_trace(session, PROMPT)
    T = st.trace.n_tokens
    worker = HeldWorker(session)
    view = rollout_view.RolloutView(st, worker)
    qtbot.addWidget(view)
    view.show()
    last = worker.of_kind("rollout")[-1]
    first_block = ((T - 1) // 4 * 4, T)
    assert (last.request.first, last.request.stop) == first_block
    st.set_selection(query=1)
    wanted = worker.of_kind("rollout")[-1]
    assert (wanted.request.first, wanted.request.stop) == (0, 4)
    worker.answer(last)  # late: not drawn
    assert view.result is None and view.dropped == 1
    worker.answer(wanted)
    ref = reference_session(tiny_ckpt)
    np.testing.assert_allclose(view.matrix(), rollout_rows(ref, 0, 4).rows, rtol=1e-5, atol=1e-6)
    assert view.heatmap.row_labels() == tuple(st.trace.labels[:4])


def test_export_writes_the_rows(tiny_ckpt, capsys, tmp_path):
    out = tmp_path / "r.npy"
    rc, _, err = cli(capsys, "export", "--checkpoint", tiny_ckpt, "--prompt", PROMPT, "--view", "rollout",
                     "--out", str(out))
    assert rc == 0, err
    ref = reference_session(tiny_ckpt)
    got = np.load(out)
    np.testing.assert_allclose(got, rollout_rows(ref, 0, len(ref.tokens.ids)).rows, rtol=1e-5, atol=1e-6)
    png = tmp_path / "r.png"
    rc, _, err = cli(capsys, "export", "--checkpoint", tiny_ckpt, "--prompt", PROMPT, "--view", "rollout",
                     "--out", str(png))
    assert rc == 0 and png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 2000, err
