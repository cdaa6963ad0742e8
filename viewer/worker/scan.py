"""The head-importance scan as a worker request: progress per head, cancellable; the answer is
the model's `ScanResult`. The handler imports the model code on the worker thread only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.viewer.worker.requests import Request, session_mask


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class ScanRequest(Request):
    """Ablate each head on top of `base_mask`."""

    kind: ClassVar[str] = "scan"
    text: str = ""
    target: int | None = None  # None: the baseline's top token
    distractor: int | None = None
    position: int | None = None  # None: the last token
    ablation: str = "zero"
    base_mask: Any = None


def handle_scan(session, request: ScanRequest, progress, is_cancelled):
    from transformer_viewer.model.analysis.scan import head_scan

    session.prepare_analysis(request.text)

    def report(done, total):
        progress(done, total, f"scanning heads: {done}/{total}")
    return head_scan(session, target=request.target, distractor=request.distractor, position=request.position,
                     ablation=request.ablation, base_mask=session_mask(session, request.base_mask),
                     progress=report, is_cancelled=is_cancelled)
