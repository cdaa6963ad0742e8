"""The Examples menu's patching example on the bundled model: it sets the clean and corrupted
prompts and the token pair, shows the patching view, and the grid it computes is not trivial:
one head carries most of the difference, as the example's line says."""

from __future__ import annotations

import numpy as np

from tests.helpers.window import new_window, wait_idle
from transformer_viewer.model.capture.prompts import example_prompts


def test_the_patching_example_runs_on_the_bundled_model(qtbot, tmp_path):
    example = next(p for p in example_prompts() if p.corrupted)
    w = new_window(qtbot, tmp_path, None, prompt=None)
    try:
        w.load(None, device="cpu")
        wait_idle(qtbot, w, lambda: w.state.model_info is not None)
        action = next(a for a in w.actions_.examples_menu.actions() if a.text() == example.title)
        action.trigger()
        view = w.views["patching"]
        wait_idle(qtbot, w, lambda: view.exact is not None)
        st = w.state
        assert st.prompt == example.text and st.patching.corrupted == example.corrupted
        assert st.patching.comparing and w.views["corrupted-prompt"].isVisible()
        tok = st.tokenizer()
        assert st.patching.tokens == tuple(tok.encode(t)[0] for t in example.tokens)
        assert w.tabs.currentWidget() is view
        grid = view.exact
        assert grid.what == "heads" and grid.normalisable
        assert grid.clean - grid.corrupted > 1.0  # the two prompts do tell ' LORD' and ' Egypt' apart
        norm = grid.normalised
        layer, head = example.head
        assert np.unravel_index(np.argmax(norm), norm.shape) == (layer, head)
        assert norm[layer, head] > 0.5 and np.ptp(norm) > 0.5
        assert (st.layer, st.head) == (layer, head)  # the menu selects the head the example is about
    finally:
        w.close()
