"""The logit attribution view: exported through the command line and shown in the window, it
draws what model/analysis/logit_attribution.py computes for the state's trace, position and tokens, and
a head's split by source position; it answers only to its own requests."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6 import QtCore

from tests.helpers.cli import cli
from tests.helpers.held_worker import HeldWorker, state_with_trace
from tests.helpers.window import PROMPT, mask_of, new_window, reference_session, shown_view, wait_idle
from transformer_viewer.model.analysis.logit_attribution import head_sources, logit_attribution

VIEW_ID = "attribution"


def test_export_writes_the_models_attribution(tiny_ckpt, capsys, tmp_path):
    out = tmp_path / "a.npy"
    rc, _, err = cli(capsys, "export", "--checkpoint", tiny_ckpt, "--prompt", PROMPT, "--view", "attribution",
                     "--query", "3", "--out", str(out))
    assert rc == 0, err
    want = logit_attribution(reference_session(tiny_ckpt), position=3).heads
    np.testing.assert_allclose(np.load(out), want, rtol=1e-5, atol=1e-6)


def test_export_of_a_logit_difference_and_its_figure(tiny_ckpt, capsys, tmp_path):
    out = tmp_path / "pair.npy"
    rc, _, err = cli(capsys, "export", "--checkpoint", tiny_ckpt, "--prompt", PROMPT, "--view", "attribution",
                     "--target", " cat", "--distractor", "42", "--out", str(out))
    assert rc == 0, err
    ref = reference_session(tiny_ckpt)
    cat = ref.tokenizer.encode(" cat", add_special_tokens=False)[0]
    np.testing.assert_allclose(np.load(out), logit_attribution(ref, tokens=(cat, 42)).heads, rtol=1e-5, atol=1e-6)
    png = tmp_path / "a.png"
    rc, _, err = cli(capsys, "export", "--checkpoint", tiny_ckpt, "--prompt", PROMPT, "--view", "attribution",
                     "--out", str(png))
    assert rc == 0 and png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 5000, err


def test_the_window_view_follows_the_mask_and_the_selected_token(qtbot, tmp_path, tiny_ckpt):
    with shown_view(qtbot, tmp_path, tiny_ckpt, VIEW_ID) as (w, view):
        ref = reference_session(tiny_ckpt)
        want = logit_attribution(ref)
        np.testing.assert_allclose(view.matrix(), want.heads, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(view.result.mlp, want.mlp, rtol=1e-5, atol=1e-6)
        assert view.result.total() == pytest.approx(view.result.logit, rel=1e-4, abs=1e-4)
        from transformer_viewer.viewer.views.attribution_view import term_name

        top = want.top(3)
        assert [row[0] for row in view.top_rows()[:3]] == [term_name(t) for t in top]
        assert view.top_rows()[0][2] == f"{100 * top[0]['share']:.1f}%"
        assert "frozen at position" in view.note.text()
        w.state.set_mask(mask_of(w, (1, 2)))
        w.state.set_selection(query=2)
        wait_idle(qtbot, w, lambda: view.result is not None and view.result.position == 2
                  and view.result.mask[1, 2])
        want = logit_attribution(ref, position=2, mask=mask_of(w, (1, 2))).heads
        np.testing.assert_allclose(view.matrix(), want, rtol=1e-5, atol=1e-6)
        assert view.matrix()[1, 2] == 0.0


def test_clicking_a_head_selects_it_everywhere_and_splits_its_term_by_source(qtbot, tmp_path, tiny_ckpt):
    with shown_view(qtbot, tmp_path, tiny_ckpt, VIEW_ID) as (w, view):
        hm = view.heatmap
        QtCore.QCoreApplication.processEvents()
        pos = hm.graphics.mapFromScene(hm.cell_scene_pos(1, 3))
        qtbot.mouseClick(hm.graphics.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=pos)
        assert (w.state.layer, w.state.head) == (1, 3)
        wait_idle(qtbot, w, lambda: view.sources is not None and view.sources[:2] == (1, 3))
        split = view.sources[2]
        ref = reference_session(tiny_ckpt)
        np.testing.assert_allclose(split, head_sources(ref, 1, 3), rtol=1e-5, atol=1e-6)
        assert float(split.sum()) == pytest.approx(float(view.result.heads[1, 3]), rel=1e-4, abs=1e-5)


def test_the_title_names_the_token_in_the_models_own_vocabulary(qtbot, tmp_path):
    """A family model with its own tokenizer.json: the title's token is the one the next-token
    panel shows first, labelled by that tokenizer (GPT-2's labels name other tokens)."""
    from tests.helpers.hf_family_models import save_with_tokenizer
    from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer
    from transformer_viewer.viewer.views.logits_panel import token_label

    folder = tmp_path / "llama"
    save_with_tokenizer("llama", str(folder))
    w = new_window(qtbot, tmp_path, str(folder))
    try:
        view = w.views[VIEW_ID]
        w.show_view(VIEW_ID)
        wait_idle(qtbot, w, lambda: view.result is not None)
        top = int(w.state.trace.next.top_ids[0])
        assert view.result.tokens == (top,)
        own = token_label(top, load_tokenizer(str(folder)))
        assert f"logit of {own!r}" in view.heatmap.title() and own != token_label(top, load_tokenizer("gpt2"))
    finally:
        w.close()


def test_a_pair_picked_from_the_candidates_and_a_stale_answer_dropped(qtbot, tiny_ckpt):
    """Tokens picked from the next-token candidates ask for the difference; an answer to an
    earlier request that arrives late is not drawn."""
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.viewer.views.attribution_view import AttributionView
    from transformer_viewer.viewer.worker.handlers import WorkerSession

    ref = reference_session(tiny_ckpt)
    session = WorkerSession(load_checkpoint(tiny_ckpt, device="cpu"))
    st = state_with_trace(session, PROMPT)
    worker = HeldWorker(session)
    view = AttributionView(st, worker)
    qtbot.addWidget(view)
    view.show()
    first = worker.of_kind("attribution")[-1]
    assert first.request.tokens == ()
    top = [int(i) for i in st.trace.next.top_ids[:2]]
    assert view.token_a.count() >= 2 and int(view.token_a.itemData(1)) == top[1]
    view.token_a.setCurrentIndex(1)
    view.token_b.setCurrentIndex(0)
    view.apply_tokens()
    second = worker.of_kind("attribution")[-1]
    assert second.request.tokens == (top[1], top[0])
    worker.answer(first)  # late: the view wants the pair now
    assert view.result is None and view.dropped == 1
    worker.answer(second)
    np.testing.assert_allclose(view.matrix(), logit_attribution(ref, tokens=(top[1], top[0])).heads,
                               rtol=1e-5, atol=1e-6)
    assert "\u2212 logit" in view.heatmap.title()
    asked = len(worker.held)
    view.token_a.setEditText(" the cat")  # two tokens: said in the view's line, nothing asked
    view.apply_tokens()
    assert "not one" in view.info.text() and len(worker.held) == asked


def test_under_a_feature_clamp_the_view_draws_the_clamp_term(qtbot, tmp_path, tiny_ckpt, sae_folder):
    """A clamp of the SAE at layer 0's output: the view's terms are the library's under it, with
    a clamp term for layer 0 in the table and a purple bar per layer."""
    from tests.helpers.sae_window import close, opened, reference
    from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
    from transformer_viewer.viewer.export import export_view
    from transformer_viewer.viewer.views.attribution_view import term_name

    with shown_view(qtbot, tmp_path, tiny_ckpt, VIEW_ID) as (w, view):
        opened(qtbot, w, sae_folder)
        clamp = FeatureClamp(0, 5, "set", 40.0)
        w.state.set_clamps((clamp,))
        wait_idle(qtbot, w, lambda: view.result is not None and view.result.clamped == (0,))
        ref = reference(tiny_ckpt, sae_folder)
        change = Intervention.make(ref.config, clamps=(clamp,))
        want = logit_attribution(ref, view.result.position, view.result.tokens, intervention=change)
        close(view.result.clamp, want.clamp, "the clamp terms")
        close(view.matrix(), want.heads, "the heads under the clamp")
        assert view.result.total() == pytest.approx(view.result.logit, rel=1e-4, abs=1e-4)
        names = [row[0] for row in view.top_rows()]
        assert "clamps L0" in names and term_name(want.top(1)[0]) == names[0]
        assert len(view.bar_items) == 4 and "purple: feature clamps" in view.bars.getPlotItem().titleLabel.text
        view.resize(1000, 650)
        out = export_view(view, str(tmp_path / "attribution_clamped.png"))
        assert open(out, "rb").read(4) == b"\x89PNG"
        w.state.set_clamps(())
        wait_idle(qtbot, w, lambda: view.result is not None and not view.result.clamped)
        assert len(view.bar_items) == 3 and "purple" not in view.bars.getPlotItem().titleLabel.text
