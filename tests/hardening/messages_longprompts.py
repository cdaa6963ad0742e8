"""Message triggers for recomputing what a trace does not keep (patterns, tiles, MLP activations)."""

from __future__ import annotations

from tests.hardening.message_case import Case, raised
from transformer_viewer.model import on_demand


def _traced(ctx, prompt="one two three four five"):
    s = ctx.session()
    s.set_prompt(prompt)
    return s, s.run()


def _other_prompt(ctx):
    s, trace = _traced(ctx)
    s.set_prompt("something else")
    return raised(lambda: on_demand.head_pattern(s, trace, 0, 0))


def _layer(ctx):
    s, trace = _traced(ctx)
    return raised(lambda: on_demand.mlp_activations(s, trace, 9))


def _resid_layer(ctx):
    s, trace = _traced(ctx)
    return raised(lambda: s.resid_pre(trace, 9))


def _head(ctx):
    s, trace = _traced(ctx)
    return raised(lambda: on_demand.head_pattern(s, trace, 0, 9))


def _tile(ctx):
    s, trace = _traced(ctx)
    return raised(lambda: on_demand.pattern_tile(s, trace, 0, 0, (0, 99), (0, 1)))


def _rows(ctx):
    s, trace = _traced(ctx)
    return raised(lambda: list(on_demand.iter_pattern_rows(s, trace, 0, 0, 3, 1)))


CASES = [
    Case("pattern of a trace from another prompt", _other_prompt, "another prompt than the session's"),
    Case("MLP activations of a layer that does not exist", _layer, "layer 9 does not exist"),
    Case("residual stream of a layer that does not exist", _resid_layer, "layer 9 does not exist"),
    Case("pattern of a head that does not exist", _head, "head 9 does not exist"),
    Case("tile outside the prompt", _tile, "outside the prompt's"),
    Case("pattern rows outside the prompt", _rows, "rows 3..1 are outside"),
]
