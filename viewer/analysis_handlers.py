"""Worker-thread handlers for the analysis requests (logit lens, head scan, generation).

Registered by name from `analysis_requests`; this module imports torch and runs only on the
worker thread. Lens results are kept in `session.scratch`, which the session empties whenever
the prompt or the device changes.
"""

from __future__ import annotations

import numpy as np

from transformer_viewer.model.diff import lens_diff
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.generate import generate
from transformer_viewer.model.lens import logit_lens
from transformer_viewer.model.scan import head_scan
from transformer_viewer.viewer.analysis_requests import GenerateRequest, LensRequest, LensResult, ScanRequest
from transformer_viewer.viewer.requests import Cancelled


def _prepare(session, text: str) -> None:
    session.ensure_prompt(text)
    if not session.tokens.ids:
        raise ModelError("the prompt is empty; type some text first")
    try:
        session.residuals()
    except ModelError:
        session.predict(None)  # fills the layer cache with one clean run


def _mask(session, mask) -> np.ndarray:
    L, nh = session.config.n_layer, session.config.n_head
    return np.zeros((L, nh), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)


def handle_lens(session, request: LensRequest, progress, is_cancelled) -> LensResult:
    _prepare(session, request.text)
    mask = _mask(session, request.mask)
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


def handle_scan(session, request: ScanRequest, progress, is_cancelled):
    _prepare(session, request.text)

    def report(done, total):
        progress(done, total, f"scanning heads: {done}/{total}")
    return head_scan(session, target=request.target, distractor=request.distractor, position=request.position,
                     ablation=request.ablation, base_mask=_mask(session, request.base_mask),
                     progress=report, is_cancelled=is_cancelled)


def handle_generate(session, request: GenerateRequest, progress, is_cancelled):
    _prepare(session, request.text)

    def report(done, total):
        progress(done, total, f"generating: {done}/{total} tokens")
    return generate(session, request.n_tokens, temperature=request.temperature, top_k=request.top_k,
                    seed=request.seed, mask=_mask(session, request.mask), ablation=request.ablation,
                    progress=report, is_cancelled=is_cancelled)
