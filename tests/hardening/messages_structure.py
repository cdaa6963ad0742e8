"""Triggers for the messages of the head attribution (model/analysis/attribution.py)."""

from __future__ import annotations

from tests.hardening.message_case import Case, raised

PROMPT = "The cat sat on the mat"


def attribution(ctx, text=PROMPT, **kw):
    from transformer_viewer.model.analysis.attribution import head_attribution

    s = ctx.session()
    if text:
        s.set_prompt(text)
    return raised(lambda: head_attribution(s, **kw))


CASES = [
    Case("attribution without a prompt", lambda c: attribution(c, text=""), "the prompt is empty; type some text first"),
    Case("attribution past the prompt", lambda c: attribution(c, position=40), "position 40 is outside the prompt's 6 tokens"),
    Case("attribution of a token past the vocabulary", lambda c: attribution(c, token=10**6),
         "token id 1000000 is outside the vocabulary of"),
]
