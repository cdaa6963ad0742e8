"""The head-importance scan as a worker request: progress per head, cancellable; the answer is
the model's `ScanResult`. The handler imports the model code on the worker thread only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.viewer.worker.requests import Request


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class ScanRequest(Request):
    """Ablate each head on top of `intervention` (which also says how)."""

    kind: ClassVar[str] = "scan"
    text: str = ""
    target: int | None = None  # None: the baseline's top token
    distractor: int | None = None
    position: int | None = None  # None: the last token
    intervention: Any = None  # Intervention (model/capture/interventions.py); None: the clean run


def handle_scan(session, request: ScanRequest, progress, is_cancelled):
    from transformer_viewer.model.analysis.scan import head_scan

    session.prepare_analysis(request.text)

    def report(done, total):
        progress(done, total, f"scanning heads: {done}/{total}")
    return head_scan(session, target=request.target, distractor=request.distractor, position=request.position,
                     intervention=request.intervention,
                     progress=report, is_cancelled=is_cancelled)
