"""File > Open prompt pairs: the patching view averages its grid over a file's pairs; a bad file
is one line and changes nothing."""

from __future__ import annotations

import numpy as np

from tests.helpers.window import new_window, wait_idle
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.analysis.patching.pairs import patch_grid_over_pairs
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer

PAIRS = [("When Mary and John went to the store, John gave a drink to",
          "When Mary and John went to the store, Mary gave a drink to"),
         ("When Anna and Tom went to the park, Tom gave a ball to",
          "When Anna and Tom went to the park, Anna gave a ball to")]


def test_a_pairs_file_is_averaged_in_the_view(qtbot, tmp_path, tiny_ckpt):
    from tests.helpers.window import reference_session

    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{a}\t{b}\n" for a, b in PAIRS), encoding="utf-8")
    tok = Tokenizer()
    tokens = (tok.encode(" Mary")[0], tok.encode(" John")[0])
    w = new_window(qtbot, tmp_path, tiny_ckpt, prompt=PAIRS[0][0])
    try:
        w.state.set_patching(tokens=tokens, what="heads")
        assert w.actions_.open_pairs(str(path))
        view = w.views["patching"]
        wait_idle(qtbot, w, lambda: view.exact is not None)
        metric = PatchMetric.make("logit-diff", tokens)
        want = patch_grid_over_pairs(reference_session(tiny_ckpt, PAIRS[0][0]), PAIRS, "heads", lambda _s: metric)
        np.testing.assert_allclose(view.exact.raw, want.raw, rtol=1e-5, atol=1e-5)
        assert view.exact.clean == want.clean or abs(view.exact.clean - want.clean) < 1e-5
        assert "pairs from pairs.tsv (averaged)" in view.title()
        assert "mean over 2 prompt pairs" in view.notes.text()
        w.run_prompt(PAIRS[1][0])  # a clean prompt typed over the pairs: that pair alone again
        assert w.state.patching.pairs == () and w.state.patching.pairs_name == ""
    finally:
        w.close()


def test_a_bad_pairs_file_is_one_line_and_changes_nothing(qtbot, tmp_path, tiny_ckpt):
    path = tmp_path / "bad.tsv"
    path.write_text("no tab on this line\n", encoding="utf-8")
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        before = w.state.patching
        assert not w.actions_.open_pairs(str(path))
        assert w.last_error and "\n" not in w.last_error and "bad.tsv" in w.last_error
        assert w.state.patching == before
    finally:
        w.close()
