"""The routes view: draws model/analysis/routes.py's graph for the state's trace and query, rebuilds it
at the slider's threshold, names what the pointer is over, selects a head from an attention
edge, colours the token strip by the token shares while shown, exports, and drops answers it no
longer wants."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6 import QtCore

from tests.helpers.cli import cli
from tests.helpers.held_worker import HeldWorker, state_with_trace
from tests.helpers.window import PROMPT, new_window, reference_session, shown_view, wait_idle
from transformer_viewer.model.analysis.routes import information_routes

VIEW_ID = "routes"


def _same_graph(got, want) -> None:
    np.testing.assert_array_equal(got.nodes, want.nodes)
    np.testing.assert_array_equal(got.edges, want.edges)
    np.testing.assert_allclose(got.weight, want.weight, rtol=1e-5, atol=1e-6)


def test_the_window_view_draws_the_routes_and_follows_the_threshold(qtbot, tmp_path, tiny_ckpt):
    with shown_view(qtbot, tmp_path, tiny_ckpt, VIEW_ID) as (w, view):
        ref = reference_session(tiny_ckpt)
        _same_graph(view.result, information_routes(ref))
        assert view.result.position == w.state.trace.n_tokens - 1  # the last token by default
        assert view.threshold_value() == pytest.approx(0.04) and view.renormalize.isChecked()
        strip = w.views["tokens"]
        np.testing.assert_allclose(w.state.token_overlay[0], view.result.token_share)
        assert "sum over paths of the products of edge contributions" in strip.legend.text()
        view.set_threshold(0.01)
        view.renormalize.setChecked(False)
        wait_idle(qtbot, w, lambda: view.result.threshold == pytest.approx(0.01) and not view.result.renormalized)
        _same_graph(view.result, information_routes(ref, threshold=0.01, renormalize=False))
        w.state.set_selection(query=4)
        wait_idle(qtbot, w, lambda: view.result.position == 4)
        w.show_view("attention")  # the strip colours by its own mode again
        assert w.state.token_overlay is None and "sum over paths" not in strip.legend.text()


def test_hover_names_an_edge_and_a_click_selects_its_head_and_query(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        view = w.views[VIEW_ID]
        w.show_view(VIEW_ID)
        view.set_threshold(0.0)  # every edge: attention edges are there to click
        wait_idle(qtbot, w, lambda: view.result is not None and view.result.threshold == 0.0)
        r = view.result
        QtCore.QCoreApplication.processEvents()
        vb = view.plot.getPlotItem().getViewBox()
        attention = np.nonzero(r.edge_kind == 0)[0]
        mid = e = None
        for cand in attention[np.argsort(-r.weight[attention])]:  # one whose middle no other edge crosses
            s, d = view._xy[r.edges[cand, 0]], view._xy[r.edges[cand, 1]]
            point = vb.mapViewToScene(QtCore.QPointF(*((s + d) / 2)))
            point = QtCore.QPointF(view.plot.mapToScene(view.plot.mapFromScene(point)))  # a whole pixel, as clicked
            if view.pick(vb.mapSceneToView(point)) == ("edge", int(cand)):
                mid, e = point, int(cand)
                break
        assert e is not None
        view.plot.scene().sigMouseMoved.emit(mid)
        heads = r.head_weight[e]
        h = int(np.argmax(heads))
        assert f"contribution {float(r.weight[e]):.4f}" in view.hover_label.text()
        assert f"H{h} {float(heads[h]):.4f}" in view.hover_label.text()
        qtbot.mouseClick(view.plot.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=view.plot.mapFromScene(mid))
        dst = r.nodes[r.edges[e, 1]]
        assert (w.state.layer, w.state.head, w.state.query_index) == (int(dst[1]), h, int(dst[2]))
        assert view.position == r.position  # the route stays where it was
        wait_idle(qtbot, w)
        assert view.result.position == r.position
        node = vb.mapViewToScene(QtCore.QPointF(*view._xy[0]))
        view.plot.scene().sigMouseMoved.emit(node)
        assert view.hover_label.text().startswith(r.node_name(0))
    finally:
        w.close()


def test_a_late_answer_is_dropped_and_cancel_says_so(qtbot, tiny_ckpt):
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.viewer.views.routes_view import RoutesView
    from transformer_viewer.viewer.worker.handlers import WorkerSession
    from transformer_viewer.viewer.worker.requests import Failure

    session = WorkerSession(load_checkpoint(tiny_ckpt, device="cpu"))
    st = state_with_trace(session, PROMPT)
    worker = HeldWorker(session)
    view = RoutesView(st, worker)
    qtbot.addWidget(view)
    view.show()
    first = worker.of_kind("routes")[-1]
    st.set_selection(query=3)
    second = worker.of_kind("routes")[-1]
    assert (first.request.position, second.request.position) == (st.trace.n_tokens - 1, 3)
    worker.answer(first)
    assert view.result is None and view.dropped == 1
    worker.answer(second)
    assert view.result.position == 3
    st.set_selection(query=2)
    third = worker.of_kind("routes")[-1]
    third.on_failure(Failure(third.request, "cancelled", cancelled=True))
    assert "stopped" in view.info.text()
    st.set_selection(query=1)  # asks again
    assert worker.of_kind("routes")[-1].request.position == 1


def test_export_writes_the_graph(tiny_ckpt, capsys, tmp_path):
    for ext, magic in ((".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")):
        out = tmp_path / f"routes{ext}"
        rc, _, err = cli(capsys, "export", "--checkpoint", tiny_ckpt, "--prompt", PROMPT, "--view", "routes",
                         "--out", str(out))
        assert rc == 0, err
        assert out.read_bytes().startswith(magic) and out.stat().st_size > 1000
    csv = tmp_path / "edges.npy"
    rc, _, err = cli(capsys, "export", "--checkpoint", tiny_ckpt, "--prompt", PROMPT, "--view", "routes",
                     "--out", str(csv))
    want = information_routes(reference_session(tiny_ckpt))
    got = np.load(csv)
    assert rc == 0 and got.shape == (len(want.edges), 8)
    np.testing.assert_allclose(got[:, 7], want.weight, rtol=1e-5, atol=1e-6)


def test_the_routes_follow_a_feature_clamp(qtbot, tmp_path, tiny_ckpt, sae_folder):
    """A clamp set in the window reaches the routes: the view's graph is the library's under it."""
    from tests.helpers.sae_window import opened, reference
    from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention

    with shown_view(qtbot, tmp_path, tiny_ckpt, VIEW_ID) as (w, view):
        view.set_threshold(0.0)
        wait_idle(qtbot, w, lambda: view.result is not None and view.result.threshold == 0.0)
        plain = view.result
        opened(qtbot, w, sae_folder)
        clamp = FeatureClamp(0, 5, "set", 40.0)
        w.state.set_clamps((clamp,))
        wait_idle(qtbot, w, lambda: view.result is not plain and w.state.trace.intervention.clamps == (clamp,))
        ref = reference(tiny_ckpt, sae_folder)
        want = information_routes(ref, threshold=0.0, intervention=Intervention.make(ref.config, clamps=(clamp,)))
        _same_graph(view.result, want)
        assert not np.allclose(view.result.token_share, plain.token_share, atol=1e-4)
