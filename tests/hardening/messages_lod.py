"""Message triggers for the long-prompt attention views: exporting a head's full pattern."""

from __future__ import annotations

from types import SimpleNamespace

from tests.hardening.message_case import Case, raised


def _pattern_to_png(ctx):
    from transformer_viewer.viewer.window.pattern_export import pattern_request

    state = SimpleNamespace(trace=SimpleNamespace(run_id=1), layer=0, head=0)
    return raised(lambda: pattern_request(state, str(ctx.tmp / "head.png")))


def _pattern_before_a_trace(ctx):
    from transformer_viewer.viewer.window.pattern_export import pattern_request

    return raised(lambda: pattern_request(SimpleNamespace(trace=None, layer=0, head=0), str(ctx.tmp / "head.npy")))


CASES = [
    Case("a head's full pattern to a non-.npy file", _pattern_to_png, "a head's full pattern is written as .npy"),
    Case("a head's full pattern before any prompt ran", _pattern_before_a_trace, "nothing to export yet"),
]
