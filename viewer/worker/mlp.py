"""A layer's MLP activations on demand, as a worker request: what the MLP view, its diff and the
token strip's neuron colouring draw when the trace keeps only per-neuron summaries.

The activations are recomputed from the session's cached residual stream of the run that made
the trace (model/capture/on_demand.py), so they equal what that run's forward computed. Requests of
this kind supersede each other: moving to another layer or prompt drops the answer no one
wants any more. The handler imports the model code on the worker thread only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from transformer_viewer.model.errors import stop_if_cancelled
from transformer_viewer.viewer.worker.requests import Request


@dataclass(frozen=True)
class MlpActivationsRequest(Request):
    """The (T, n_mlp) post-activations of `layer` in the runs numbered `run_ids` (the masked
    trace's and, for a diff, the clean one's)."""

    kind: ClassVar[str] = "mlp-activations"
    run_ids: tuple[int, ...] = ()
    layer: int = 0


@dataclass(frozen=True)
class MlpActivationsResult:
    layer: int
    acts: dict  # run_id -> (T, n_mlp) float32 ndarray


def handle_mlp(session, request: MlpActivationsRequest, progress, is_cancelled) -> MlpActivationsResult:
    from transformer_viewer.model.capture.on_demand import mlp_activations
    from transformer_viewer.viewer.worker.patterns import _trace_of

    acts = {}
    for i, run_id in enumerate(dict.fromkeys(request.run_ids)):
        stop_if_cancelled(is_cancelled)
        progress(i, len(request.run_ids), f"MLP activations of layer {request.layer}…")
        acts[run_id] = mlp_activations(session, _trace_of(session, run_id), request.layer)
    return MlpActivationsResult(request.layer, acts)
