"""Attention rollout as a worker request (model/analysis/rollout.py): a block of query rows of the
rollout through a range of layers, never the whole (T, T) product. The handler imports the
model code on the worker thread only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.model.errors import stop_if_cancelled
from transformer_viewer.viewer.worker.requests import Request


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class RolloutRequest(Request):
    kind: ClassVar[str] = "rollout"
    text: str = ""
    first: int = 0  # query rows first..stop-1 (at most model/analysis/rollout.py's MAX_ROWS)
    stop: int = 1
    layers: tuple[int, int] | None = None  # (a, b): layers a..b-1; None: every layer
    heads: Any = "mean"  # "mean", "max", or (layer, head) pairs
    residual: bool = True
    intervention: Any = None  # Intervention (model/capture/interventions.py); None: the clean run


def handle_rollout(session, request: RolloutRequest, progress, is_cancelled):
    from transformer_viewer.model.analysis.rollout import rollout_rows
    from transformer_viewer.viewer.worker.handlers import progress_after_delay

    session.prepare_analysis(request.text)
    report = progress_after_delay(progress, "rolling out layer {step} of {total}…")

    def step(i: int, n: int) -> None:
        stop_if_cancelled(is_cancelled)
        report(i, n)

    return rollout_rows(session, request.first, request.stop, layers=request.layers, heads=request.heads,
                        residual=request.residual, intervention=request.intervention, step=step)
