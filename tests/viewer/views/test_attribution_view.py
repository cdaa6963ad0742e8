"""The head attribution view: exported through the command line and shown in the window, it
draws what model/attribution.py computes for the state's trace and position."""

from __future__ import annotations

import numpy as np

from tests.helpers.cli import cli
from tests.helpers.window import PROMPT, mask_of, new_window, reference_session, wait_idle
from transformer_viewer.model.attribution import head_attribution


def test_export_writes_the_models_attribution(tiny_ckpt, capsys, tmp_path):
    out = tmp_path / "a.npy"
    rc, _, err = cli(capsys, "export", "--checkpoint", tiny_ckpt, "--prompt", PROMPT, "--view", "attribution",
                     "--query", "3", "--out", str(out))
    assert rc == 0, err
    want = head_attribution(reference_session(tiny_ckpt), position=3).direct
    np.testing.assert_allclose(np.load(out), want, rtol=1e-5, atol=1e-6)


def test_the_window_view_follows_the_mask_and_the_selected_token(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        view = w.views["Head attribution"]
        w.show_view("Head attribution")
        wait_idle(qtbot, w, lambda: view.result is not None)
        ref = reference_session(tiny_ckpt)
        np.testing.assert_allclose(view.matrix(), head_attribution(ref).direct, rtol=1e-5, atol=1e-6)
        w.state.set_mask(mask_of(w, (1, 2)))
        w.state.set_selection(query=2)
        wait_idle(qtbot, w, lambda: view.result is not None and view.result.position == 2
                  and view.result.mask[1, 2])
        want = head_attribution(ref, position=2, mask=mask_of(w, (1, 2))).direct
        np.testing.assert_allclose(view.matrix(), want, rtol=1e-5, atol=1e-6)
        assert view.matrix()[1, 2] == 0.0
    finally:
        w.close()


def test_the_title_names_the_token_in_the_models_own_vocabulary(qtbot, tmp_path):
    """A family model with its own tokenizer.json: the title's token is the one the next-token
    panel shows first, labelled by that tokenizer (GPT-2's labels name other tokens)."""
    from tests.helpers.hf_family_models import save_with_tokenizer
    from transformer_viewer.model.tokenizer import load_tokenizer
    from transformer_viewer.viewer.views.logits_panel import token_label

    folder = tmp_path / "llama"
    save_with_tokenizer("llama", str(folder))
    w = new_window(qtbot, tmp_path, str(folder))
    try:
        view = w.views["Head attribution"]
        w.show_view("Head attribution")
        wait_idle(qtbot, w, lambda: view.result is not None)
        top = int(w.state.trace.next.top_ids[0])
        assert view.result.token_id == top
        own = token_label(top, load_tokenizer(str(folder)))
        assert f"logit of {own!r}" in view.heatmap.title() and own != token_label(top, load_tokenizer("gpt2"))
    finally:
        w.close()
