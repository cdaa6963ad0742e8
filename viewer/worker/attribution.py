"""Direct logit attribution as worker requests (model/analysis/logit_attribution.py): every writer's
direct effect on a token's logit (or a pair's logit difference) at one position, and one head's
term split by the key position it read. The handlers import the model code on the worker
thread only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.model.errors import stop_if_cancelled
from transformer_viewer.viewer.worker.requests import Request


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class AttributionRequest(Request):
    kind: ClassVar[str] = "attribution"
    text: str = ""
    position: int | None = None  # None: the last token
    tokens: tuple[int, ...] = ()  # (): the top token; (A,): A's logit; (A, B): logit(A) - logit(B)
    intervention: Any = None  # Intervention (model/capture/interventions.py); None: the clean run


@dataclass(frozen=True, eq=False)
class HeadSourcesRequest(Request):
    """Head (layer, head)'s term of an attribution, split by the key position it read."""

    kind: ClassVar[str] = "attribution_sources"
    text: str = ""
    layer: int = 0
    head: int = 0
    position: int | None = None
    tokens: tuple[int, ...] = ()
    intervention: Any = None  # Intervention (model/capture/interventions.py); None: the clean run


def handle_attribution(session, request: AttributionRequest, progress, is_cancelled):
    from transformer_viewer.model.analysis.logit_attribution import logit_attribution
    from transformer_viewer.viewer.worker.handlers import progress_after_delay

    session.prepare_analysis(request.text)
    report = progress_after_delay(progress, "attributing the writers of layer {step} of {total}…")

    def step(layer: int, n_layer: int) -> None:
        stop_if_cancelled(is_cancelled)
        report(layer, n_layer)

    return logit_attribution(session, request.position, tokens=request.tokens or None,
                             intervention=request.intervention, step=step)


def handle_head_sources(session, request: HeadSourcesRequest, progress, is_cancelled):
    from transformer_viewer.model.analysis.logit_attribution import head_sources

    session.prepare_analysis(request.text)
    stop_if_cancelled(is_cancelled)
    return head_sources(session, request.layer, request.head, request.position, tokens=request.tokens or None,
                        intervention=request.intervention)
