"""Results that outlive their prompt say so: a head scan (run only when asked), a logit lens and a
head attribution (recomputed when shown) of an earlier prompt are marked until they are redone,
and clearing the prompt clears the scan and covers every view that shows a prompt's results."""

from __future__ import annotations

import pytest

from tests.helpers.window import PROMPT, wait_idle
from transformer_viewer.viewer.views.scan_view import NO_PROMPT
from transformer_viewer.viewer.window import empty_states as es

OTHER = "The dog sat on the rug. The dog"  # as many tokens as PROMPT: a length check cannot tell them apart


def shown(qtbot, window, view_id: str):
    window.show_view(view_id)
    view = window.views[view_id]
    qtbot.waitUntil(view.isVisible)
    return view


def test_the_tokens_match_in_number(window):
    tok = window.state.tokenizer()
    assert len(tok.encode(OTHER)) == len(tok.encode(PROMPT)) and OTHER != PROMPT


def test_a_scan_of_the_previous_prompt_is_marked_until_scanned_again(qtbot, window):
    scan = shown(qtbot, window, "scan")
    scan.run()
    wait_idle(qtbot, window, lambda: not scan.running and scan.result is not None)
    assert scan.stale.message() is None and not scan.is_stale()

    window.run_prompt(OTHER)
    wait_idle(qtbot, window, lambda: window.state.trace.text == OTHER)
    assert scan.result is not None and scan.is_stale()
    mark = scan.stale.message()
    assert mark is not None and scan.stale.isVisible()
    assert "previous prompt" in mark and PROMPT[:20] in mark and "Run scan" in mark
    assert scan.stale.geometry().top() == 0 and scan.stale.width() == scan.heatmap.width()  # across the grid's top

    scan.run()
    wait_idle(qtbot, window, lambda: not scan.running and scan.result_prompt == OTHER)
    assert scan.stale.message() is None and not scan.is_stale()


def test_clearing_the_prompt_clears_the_scan_and_covers_every_view(qtbot, window):
    scan = shown(qtbot, window, "scan")
    scan.run()
    wait_idle(qtbot, window, lambda: not scan.running and scan.result is not None)
    window.run_prompt("")
    qtbot.waitUntil(lambda: window.state.prompt == "")
    assert scan.result is None and scan.cover.message() == NO_PROMPT and scan.stale.message() is None
    assert scan.matrix().size == 0
    e = window.empty_states
    covered = [window.attention.heatmap, window.head_grid, window.views["tokens"], window.views["next-token"],
               *(window.views[t] for t in es.TRACE_TABS)]
    assert [e.shown(v) for v in covered] == [es.TYPE_A_PROMPT] * len(covered)
    assert e.states[id(window.views["tokens"])].isVisible()

    window.run_prompt(OTHER)  # a prompt again: every view shows its results
    wait_idle(qtbot, window, lambda: window.state.trace.text == OTHER)
    assert [e.shown(v) for v in covered] == [None] * len(covered)
    assert scan.cover.message() is not None and scan.result is None  # still waiting for Run scan


@pytest.mark.parametrize("view_id", ["logit-lens", "attribution"])
def test_a_lens_or_attribution_of_the_previous_prompt_is_marked_until_recomputed(qtbot, window, view_id):
    view = shown(qtbot, window, view_id)
    wait_idle(qtbot, window, lambda: view.result is not None)
    before = view.matrix().copy()
    assert view.stale.message() is None

    window.show_view("attention")  # behind another tab: it is not recomputed while hidden
    window.run_prompt(OTHER)
    wait_idle(qtbot, window, lambda: window.state.trace.text == OTHER)
    assert view.is_stale()
    assert "previous prompt" in view.stale.message() and PROMPT[:20] in view.stale.message()
    if view_id == "logit-lens":  # a lens of the same length is not taken for this prompt's
        assert "computing" in view.info.text() and "final top token" not in view.info.text()

    view = shown(qtbot, window, view_id)
    wait_idle(qtbot, window, lambda: not view.is_stale())
    assert view.stale.message() is None
    assert view.matrix().shape == before.shape and (view.matrix() != before).any()  # redone for the new prompt
