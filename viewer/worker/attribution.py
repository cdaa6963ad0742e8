"""Head logit attribution as a worker request: each head's direct effect on the predicted
token's logit at one position (model/attribution.py). The handler imports the model code on
the worker thread only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.model.errors import stop_if_cancelled
from transformer_viewer.viewer.worker.requests import Request, register_handler, session_mask


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class AttributionRequest(Request):
    kind: ClassVar[str] = "attribution"
    text: str = ""
    position: int | None = None  # None: the last token
    mask: Any = None  # (L, nh) bool ndarray or None
    ablation: str = "zero"


def handle_attribution(session, request: AttributionRequest, progress, is_cancelled):
    from transformer_viewer.model.attribution import head_attribution
    from transformer_viewer.viewer.worker.handlers import progress_after_delay

    session.prepare_analysis(request.text)
    report = progress_after_delay(progress, "attributing the heads of layer {step} of {total}…")

    def step(layer: int, n_layer: int) -> None:
        stop_if_cancelled(is_cancelled)
        report(layer, n_layer)

    return head_attribution(session, request.position, mask=session_mask(session, request.mask),
                            ablation=request.ablation, step=step)


register_handler(AttributionRequest, handle_attribution)
