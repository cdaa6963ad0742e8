"""Typing a prompt makes one run; the log-probabilities follow as a second pass over that same
run, installing a new Trace of it. A view that asks the worker computes once per run, not once
per `trace_changed`: the count of its requests per prompt is one."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers.window import new_window, wait_idle

VIEWS = {"attribution": "AttributionRequest", "routes": "RoutesRequest", "logit-lens": "LensRequest"}


@pytest.mark.parametrize("view_id", sorted(VIEWS))
def test_a_shown_view_asks_once_per_prompt(qtbot, tmp_path, tiny_ckpt, view_id):
    w = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        w.show_view(view_id)
        wait_idle(qtbot, w, lambda: w.state.trace is not None and w.state.trace.token_logprobs is not None)
        asked = Counter()
        submit = w.worker.submit

        def counting(request, *args, **kwargs):
            asked[type(request).__name__] += 1
            return submit(request, *args, **kwargs)

        w.worker.submit = counting
        for text in ("A new prompt for the view", "And another one after it"):
            before = asked[VIEWS[view_id]]
            w.run_prompt(text)
            wait_idle(qtbot, w, lambda t=text: w.state.trace is not None and w.state.trace.text == t
                      and w.state.trace.token_logprobs is not None)
            qtbot.wait(50)  # any request the second pass would make is made by now
            assert asked["LogprobsRequest"] >= 1  # the second pass did run
            assert asked[VIEWS[view_id]] - before == 1, asked
    finally:
        w.close()
