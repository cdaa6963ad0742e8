"""The logit lens as a worker request: `LensRequest` in, `LensResult` out.

The handler runs on the worker thread and imports the model code only there, so importing this
module (which registers the handler) keeps torch off the GUI thread. Lenses are kept in
`session.scratch`, which the session empties whenever the prompt or the device changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.viewer.worker.requests import Cancelled, Request, register_handler, session_mask


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


def handle_lens(session, request: LensRequest, _progress, is_cancelled) -> LensResult:
    import numpy as np

    from transformer_viewer.model.diff import lens_diff
    from transformer_viewer.model.lens import logit_lens

    session.prepare_analysis(request.text)
    mask = session_mask(session, request.mask)
    clean = session.scratch.get("lens:clean")
    if clean is None:
        clean = logit_lens(session, session.masked_residuals())
        session.scratch["lens:clean"] = clean
    if is_cancelled():
        raise Cancelled
    if not mask.any():
        return LensResult(lens=clean, clean=clean, diff=np.zeros_like(clean.top_probs), mask=mask, text=request.text)
    key = ("lens:masked", mask.tobytes(), request.ablation)
    cached = session.scratch.get("lens:masked")
    if cached is not None and cached[0] == key:
        lens = cached[1]
    else:
        lens = logit_lens(session, session.masked_residuals(mask, request.ablation), reference_ids=clean.top_ids)
        session.scratch["lens:masked"] = (key, lens)
    return LensResult(lens=lens, clean=clean, diff=lens_diff(clean, lens), mask=mask, text=request.text)


register_handler(LensRequest, handle_lens)
