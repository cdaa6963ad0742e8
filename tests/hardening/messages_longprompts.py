"""Message triggers for recomputing what a trace does not keep (patterns, tiles, MLP activations)."""

from __future__ import annotations

from tests.hardening.message_case import Case, raised
from transformer_viewer.model.capture import on_demand


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


def _worker_session(ctx):
    from transformer_viewer.viewer.worker.handlers import WorkerSession, handle_trace
    from transformer_viewer.viewer.worker.requests import TraceRequest

    s = WorkerSession(ctx.session().loaded)
    result = handle_trace(s, TraceRequest(text="one two three"), lambda *a: None, lambda: False)
    return s, result.trace


def _stale_tile(ctx):
    from transformer_viewer.viewer.worker.patterns import PatternTileRequest, handle_tile

    s, _trace = _worker_session(ctx)
    return raised(lambda: handle_tile(s, PatternTileRequest(run_id=-1), lambda *a: None, lambda: False))


def _unwritable_export(ctx):
    from transformer_viewer.viewer.worker.patterns import PatternExportRequest, handle_export

    s, trace = _worker_session(ctx)
    path = str(ctx.tmp / "no such folder" / "p.npy")
    return raised(lambda: handle_export(s, PatternExportRequest(run_id=trace.run_id, path=path), lambda *a: None,
                                        lambda: False))


CASES += [
    Case("tile of a trace the worker no longer holds", _stale_tile, "no longer the worker's"),
    Case("pattern export into a missing folder", _unwritable_export, "cannot write"),
]
