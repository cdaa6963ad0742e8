"""The corrupted prompt box: hidden until a comparison is asked for, its tokens as chips, the
tokens that differ from the clean prompt's outlined in both strips, and one line when the two
prompts tokenize to different lengths."""

from __future__ import annotations

import numpy as np

from tests.helpers.window import new_window, wait_idle
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer
from transformer_viewer.viewer.patch_setup import differing, length_line

CLEAN = "When Mary and John went to the store, John gave a drink to"
SWAPPED = "When Mary and John went to the store, Mary gave a drink to"


def _ids(clean: str, corrupted: str):
    tok = Tokenizer()
    return tok.encode(clean), tok.encode(corrupted)


def test_the_box_is_hidden_until_asked_for_and_outlines_the_differing_tokens(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt, prompt=CLEAN)
    try:
        box, strip = w.views["corrupted-prompt"], w.views["tokens"]
        assert not box.isVisible()
        assert not w.actions_.compare_action.isChecked()
        w.actions_.compare_action.trigger()  # View > Compare with a corrupted prompt
        assert w.state.patching.comparing and box.isVisible()
        qtbot.keyClicks(box.edit, SWAPPED)
        qtbot.waitUntil(lambda: w.state.corrupted_tokens is not None and w.state.corrupted_tokens.text == SWAPPED)
        a, b = _ids(CLEAN, SWAPPED)
        assert len(a) == len(b)
        want = np.array(a) != np.array(b)
        assert want.sum() == 1  # " John" -> " Mary" at one position
        assert box.canvas.labels == w.state.corrupted_tokens.labels
        np.testing.assert_array_equal(box.canvas.marked, want)
        w.show_view("attention")
        strip.catch_up()
        np.testing.assert_array_equal(strip.canvas.marked, want)
        i = int(np.argmax(want))
        assert "differs from the corrupted prompt" in strip.tooltip_text(i)
        assert "differs from the corrupted prompt" not in strip.tooltip_text(0)
        assert box.lengths.text() == f"both prompts are {len(b)} tokens; 1 differs (outlined)"
        box.close_button.click()  # stop comparing: the outline goes, the text stays
        assert not box.isVisible() and not w.actions_.compare_action.isChecked()
        assert w.state.patching.corrupted == SWAPPED
        assert not strip.canvas.marked.any()
    finally:
        w.close()


def test_prompts_of_different_lengths_get_one_line_and_an_aligned_diff(qtbot, tmp_path, tiny_ckpt):
    w = new_window(qtbot, tmp_path, tiny_ckpt, prompt=CLEAN)
    try:
        box = w.views["corrupted-prompt"]
        longer = CLEAN.replace("the store", "the big store")
        box.set_text(longer)
        wait_idle(qtbot, w)
        n_clean, n_corrupted = w.state.trace.n_tokens, len(w.state.corrupted_tokens.ids)
        assert n_corrupted == n_clean + 1
        assert box.lengths.isVisible()
        assert box.lengths.text() == length_line(n_clean, n_corrupted)
        assert "needs equal lengths" in box.lengths.text()
        # An inserted word marks only itself: nothing of the clean prompt, one corrupted token.
        clean_marks, corrupted_marks = w.state.patch_differences()
        assert not clean_marks.any()
        assert corrupted_marks.sum() == 1
        assert w.state.corrupted_tokens.labels[int(np.argmax(corrupted_marks))].strip("\u00b7 ") == "big"
    finally:
        w.close()


def test_differing_compares_equal_lengths_position_by_position():
    a, b = differing([1, 2, 3, 4], [1, 9, 3, 8])
    np.testing.assert_array_equal(a, [False, True, False, True])
    np.testing.assert_array_equal(b, a)
    a, b = differing([1, 2, 3], [7, 1, 2, 3])  # a token put in front: the rest still match
    np.testing.assert_array_equal(a, [False, False, False])
    np.testing.assert_array_equal(b, [True, False, False, False])
    assert length_line(5, 5) == ""
