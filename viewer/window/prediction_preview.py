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
    # Nothing to compare against yet, or an unmasked run (answered from the cache). The state's
    # Intervention was made for the model's shape (set_model remakes it when the shape changes).
    return state.model_info is not None and state.trace is not None and bool(state.prompt) \
        and not state.intervention.is_empty


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
