"""Message triggers for the views at the sizes real models have (the logit lens over a window
of a long prompt's positions)."""

from __future__ import annotations

from tests.hardening.message_case import Case, raised
from transformer_viewer.model.analysis.lens import logit_lens


def _lens_window(ctx):
    s = ctx.session()
    s.set_prompt("one two three four five")
    s.run()
    return raised(lambda: logit_lens(s, positions=(2, 99)))


def _lent_lens_shape(ctx):
    s = ctx.session()
    s.set_prompt("one two three four five")
    s.run()
    other = logit_lens(s, positions=(0, 2))
    return raised(lambda: logit_lens(s, known=other, known_rows=1))


CASES = [
    Case("logit lens window outside the prompt", _lens_window, "are outside the prompt's"),
    Case("a lent lens over other positions", _lent_lens_shape, "the known lens has shape"),
]
