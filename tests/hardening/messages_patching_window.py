"""Triggers for the messages of the window's patching setup and its worker requests: a setup
value the controls never make (a script or a stale setting could), a metric without its tokens,
a path grid without a receiver, a cells request without cells."""

from __future__ import annotations

from tests.hardening.message_case import Case, raised

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


def setup(**kw):
    from transformer_viewer.viewer.patch_setup import PatchSetup

    return lambda _ctx: raised(lambda: PatchSetup(**kw))


def metric_without(kind: str, tokens=()):
    from transformer_viewer.viewer.patch_setup import PatchSetup

    return lambda _ctx: raised(lambda: PatchSetup(metric=kind, tokens=tokens).metric_value())


def handled(request_type: str, **kw):
    def trigger(ctx):
        from transformer_viewer.model.analysis.patching.metric import PatchMetric
        from transformer_viewer.viewer.worker import patching
        from transformer_viewer.viewer.worker.handlers import WorkerSession

        session = WorkerSession(ctx.session().loaded)
        request = getattr(patching, request_type)(text=CLEAN, corrupted=CORRUPTED, metric=PatchMetric.make("kl"),
                                                  **kw)
        handler = patching.handle_patch if request_type == "PatchRequest" else patching.handle_patch_cells
        return raised(lambda: handler(session, request, lambda *_a: None, lambda: False))

    return trigger


CASES = [
    Case("a patching setup with a metric it does not know", setup(metric="mse"), "metric must be one of logit-diff"),
    Case("a patching setup in a third direction", setup(direction="sideways"), "direction must be one of denoise"),
    Case("a patching setup patching what cannot be", setup(what="everything"), "what is patched must be one of"),
    Case("a path patch into an input heads lack", setup(input="o"), "a receiver's input is one of q, k, v"),
    Case("a logit difference without its tokens", metric_without("logit-diff"), "choose tokens A and B for the "
         "logit-diff metric"),
    Case("a log-probability without its token", metric_without("logprob"), "choose token A for the logprob metric"),
    Case("a path grid without a receiver", handled("PatchRequest", what="path"),
         "path patching needs a receiver head"),
    Case("exact cells without a cell", handled("PatchCellsRequest", what="heads"),
         "no cells to patch: click a cell of the grid"),
]
