"""The quick answer to a head toggle: the masked next-token distribution alone.

On a mask change the window submits a `PredictRequest` just before the `TraceRequest`. The
worker takes the oldest first, so the next-token panel shows the new prediction after only the
layers from the changed one, at one position and without capture (bench: 0.04-0.45x a full
forward), while the capture that redraws every later heatmap follows.
"""

from __future__ import annotations

from transformer_viewer.viewer.worker.requests import PredictRequest, PredictResult


def worth_asking(state) -> bool:
    """Whether a head toggle should first ask for the prediction alone (a `PredictRequest`)."""
    info = state.model_info
    if info is None or state.trace is None or not state.prompt or not state.mask.any():
        return False  # nothing to compare against yet, or an unmasked run (answered from the cache)
    return state.mask.shape == (info.n_layer, info.n_head)


def show_if_current(window, request: PredictRequest, value: PredictResult) -> None:
    """Show the prediction when it answers the state as it is now and the views have not
    caught up with it already (a trace of the same intervention may have come first)."""
    st = window.state
    if value.next is None or st.trace is None:
        return
    if request.text != st.prompt or request.intervention != st.intervention:
        return
    if st.trace.intervention == st.intervention:
        return
    window.logits.show_preview(value.next, request.intervention)
