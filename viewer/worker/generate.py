"""Generation as a worker request: progress per token, cancellable (the tokens so far are kept);
the answer is the model's `Generation`. The handler imports the model code on the worker thread only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.viewer.worker.requests import Request


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class GenerateRequest(Request):
    """Continue `text` by `n_tokens`: greedy (temperature 0) or sampled with `seed`."""

    kind: ClassVar[str] = "generate"
    text: str = ""
    n_tokens: int = 20
    temperature: float = 0.0
    top_k: int | None = None
    seed: int | None = None
    intervention: Any = None  # Intervention (model/capture/interventions.py); None: the clean run


def handle_generate(session, request: GenerateRequest, progress, is_cancelled):
    from transformer_viewer.model.analysis.generate import generate

    session.prepare_analysis(request.text)

    def report(done, total):
        progress(done, total, f"generating: {done}/{total} tokens")
    return generate(session, request.n_tokens, temperature=request.temperature, top_k=request.top_k,
                    seed=request.seed, intervention=request.intervention,
                    progress=report, is_cancelled=is_cancelled)
