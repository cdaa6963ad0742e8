"""Worker requests of the analysis views (issue 5): logit lens, head scan, generation.

Importing this module registers their handlers by dotted name, so the GUI thread never imports
torch; `transformer_viewer.viewer.analysis_handlers` runs them on the worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.viewer.requests import Request, register_handler


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class LensRequest(Request):
    """The logit lens of `text` under `mask`, and of the clean model when something is masked."""

    kind: ClassVar[str] = "lens"
    text: str = ""
    mask: Any = None  # (L, nh) bool ndarray or None
    ablation: str = "zero"


@dataclass(frozen=True)
class LensResult:
    lens: Any  # LogitLens under the mask (reference_ids = the clean top tokens)
    clean: Any  # LogitLens of the clean model (the same object when nothing is masked)
    diff: Any  # (L + 1, T) float32 p_masked(clean top) - p_clean(clean top); zeros when unmasked
    mask: Any  # the mask it was computed under
    text: str = ""


@dataclass(frozen=True, eq=False)
class ScanRequest(Request):
    """Ablate each head on top of `base_mask`; progress per head, cancellable."""

    kind: ClassVar[str] = "scan"
    text: str = ""
    target: int | None = None  # None: the baseline's top token
    distractor: int | None = None
    position: int | None = None  # None: the last token
    ablation: str = "zero"
    base_mask: Any = None


@dataclass(frozen=True, eq=False)
class GenerateRequest(Request):
    """Continue `text` by `n_tokens`: greedy (temperature 0) or sampled with `seed`."""

    kind: ClassVar[str] = "generate"
    text: str = ""
    n_tokens: int = 20
    temperature: float = 0.0
    top_k: int | None = None
    seed: int | None = None
    mask: Any = None
    ablation: str = "zero"


_HANDLERS = "transformer_viewer.viewer.analysis_handlers"
register_handler(LensRequest, f"{_HANDLERS}:handle_lens")
register_handler(ScanRequest, f"{_HANDLERS}:handle_scan")
register_handler(GenerateRequest, f"{_HANDLERS}:handle_generate")
