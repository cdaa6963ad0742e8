"""The logit lens as a worker request: `LensRequest` in, `LensResult` out.

The handler runs on the worker thread and imports the model code only there, so importing this
module keeps torch off the GUI thread. Lenses are kept in
`session.scratch`, which the session empties whenever the prompt or the device changes.
A long prompt's lens is asked for over a window of its positions: every position of 8k tokens
through a 150k vocabulary would be minutes of unembedding on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.model.errors import stop_if_cancelled
from transformer_viewer.viewer.worker.requests import Request


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class LensRequest(Request):
    """The logit lens of `text` under `intervention`, and of the clean model when it changes anything."""

    kind: ClassVar[str] = "lens"
    text: str = ""
    intervention: Any = None  # Intervention (model/capture/interventions.py); None: the clean run
    window: tuple[int, int] | None = None  # positions window[0]..window[1]-1; None: all


@dataclass(frozen=True)
class LensResult:
    lens: Any  # LogitLens under the intervention (reference_ids = the clean top tokens)
    clean: Any  # LogitLens of the clean model (the same object when nothing is masked)
    diff: Any  # (L + 1, T) float32 p_masked(clean top) - p_clean(clean top); zeros when unmasked
    intervention: Any  # the Intervention it was computed under
    text: str = ""
    start: int = 0  # the position of the lens's first column
    n_tokens: int = 0  # the prompt's length (the lens may cover a window of it)


def handle_lens(session, request: LensRequest, progress, is_cancelled) -> LensResult:
    import numpy as np

    from transformer_viewer.model.analysis.diff import lens_diff
    from transformer_viewer.model.analysis.lens import logit_lens
    from transformer_viewer.model.capture.feature_clamps import clamp_layers
    from transformer_viewer.model.capture.interventions import as_intervention

    session.prepare_analysis(request.text)
    change = as_intervention(session.config, request.intervention)  # None: the clean run's
    mask = change.mask
    T = len(session.tokens.ids)
    window = (0, T) if request.window is None else tuple(request.window)
    rows = session.config.n_layer + 1
    passes = 1 if change.is_empty else 2

    def step(offset):
        def report(done, total):
            stop_if_cancelled(is_cancelled)
            progress(offset + done, passes * total, "logit lens…")
        return report

    def clean_part(a, b):
        return logit_lens(session, session.masked_residuals(), positions=(a, b), step=step(0))

    clean = _windowed(session.scratch, "lens:clean", (), window, clean_part)
    done = dict(text=request.text, start=window[0], n_tokens=T)
    if change.is_empty:
        return LensResult(lens=clean, clean=clean, diff=np.zeros_like(clean.top_probs), intervention=change, **done)
    # A head in layer l changes resid_pre of layer l + 1 on: rows 0..l are the clean lens's; a
    # feature clamp changes the run from its SAE's layer on (a clamp alone masks no head).
    first = min((*np.flatnonzero(mask.any(axis=1)).tolist(), *clamp_layers(change.clamps, session.saes)),
                default=0)

    def masked_part(a, b):
        part = clean.columns(a - window[0], b - window[0])
        masked_resid = session.masked_residuals(change)  # a rerun from layer `first`
        return logit_lens(session, masked_resid, reference_ids=part.top_ids, positions=(a, b), step=step(rows),
                          known=part, known_rows=first + 1)

    lens = _windowed(session.scratch, "lens:masked", (change,), window, masked_part)
    return LensResult(lens=lens, clean=clean, diff=lens_diff(clean, lens), intervention=change, **done)


def _windowed(scratch: dict, name: str, key: tuple, window: tuple[int, int], compute):
    """The lens over `window`, from scratch[name] when it holds this `key`: the columns it has
    are reused and only the others computed (`compute(a, b)`: the lens of positions
    a..b-1), when they are one run of positions (the window moved); kept for the next ask."""
    a, b = window
    lens = None
    cached = scratch.get(name)
    if cached is not None and cached[0] == key:
        (c0, c1), old = cached[1], cached[2]
        if c0 <= a and b <= c1:  # inside the kept window, which stays kept
            return old if (c0, c1) == (a, b) else old.columns(a - c0, b - c0)
        if c0 <= a < c1 < b:  # moved right: the new positions follow the kept ones
            lens = old.columns(a - c0, c1 - c0).then(compute(c1, b))
        elif a < c0 < b <= c1:  # moved left
            lens = compute(a, c0).then(old.columns(0, b - c0))
    if lens is None:
        lens = compute(a, b)
    scratch[name] = (key, window, lens)
    return lens
