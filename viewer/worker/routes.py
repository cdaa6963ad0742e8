"""Information-flow routes as a worker request (model/analysis/routes.py): the graph from one position
down to the input tokens. The handler imports the model code on the worker thread only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.model.errors import stop_if_cancelled
from transformer_viewer.viewer.worker.requests import Request


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class RoutesRequest(Request):
    kind: ClassVar[str] = "routes"
    text: str = ""
    position: int | None = None  # None: the last token
    threshold: float = 0.04
    renormalize: bool = True
    intervention: Any = None  # Intervention (model/capture/interventions.py); None: the clean run


def handle_routes(session, request: RoutesRequest, progress, is_cancelled):
    from transformer_viewer.model.analysis.routes import information_routes
    from transformer_viewer.viewer.worker.handlers import progress_after_delay

    session.prepare_analysis(request.text)
    report = progress_after_delay(progress, "following the routes through layer {step} of {total}…")

    def step(i: int, n_layer: int) -> None:
        stop_if_cancelled(is_cancelled)
        report(i, n_layer)

    return information_routes(session, request.position, threshold=request.threshold,
                              renormalize=request.renormalize, intervention=request.intervention, step=step)
