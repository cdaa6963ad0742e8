"""Plain messages in place of plots that have nothing to show yet.

Before the model has loaded, and until a prompt has run, the plots would show placeholder axes
(a -500..500 "head (x0.001)" grid, a one-cell "L0" mask, an empty -0.5..0.5 heatmap), which
read as data. Each such view gets an EmptyState (views/empty_state.py) laid over the whole view,
saying what it waits for ("loading the bundled model…", "type a prompt"), hidden as soon as
the view has something to draw. The analysis tabs cover their own plots the same way until
their first result. Clearing the prompt covers them all again, the token strip and the
next-token panel too: what they would show belongs to the prompt that was cleared.
"""

from __future__ import annotations

import os

from transformer_viewer.viewer.views.empty_state import EmptyState
from transformer_viewer.viewer.views.registry import VIEWS

NO_MODEL = "no model loaded: open a checkpoint from the File menu"
TYPE_A_PROMPT = "type a prompt"
RUNNING = "running the prompt\u2026"
STOPPED = "stopped: press Ctrl+Enter in the prompt to run it"
# The tabs beside the heatmap that draw from the trace (the head scan runs on request).
TRACE_TABS = tuple(v.id for v in VIEWS if v.needs_trace)


def loading_text(checkpoint: str | None) -> str:
    if checkpoint is None:
        return "loading the bundled model\u2026"
    return f"loading {os.path.basename(os.path.normpath(checkpoint)) or checkpoint}\u2026"


class EmptyStates:
    """The window's empty states: which message each view shows, from the state and the worker."""

    def __init__(self, window):
        self.window = window
        self.loading: str | None = None  # what a load under way says; None: nothing is loading
        self.stopped = False  # the first run of the prompt was cancelled: nothing is running now
        # Views that need a trace; the head mask needs only the model (its shape).
        self.trace_views = [window.attention.heatmap, window.head_grid]
        views = getattr(window, "views", {})
        self.trace_views += [views[t] for t in TRACE_TABS if t in views]
        # What only a prompt shows: covered once the prompt is cleared.
        self.prompt_views = [v for v in (views.get("tokens"), views.get("next-token")) if v is not None]
        self.states = {id(v): EmptyState(v) for v in [*self.trace_views, *self.prompt_views, window.mask_grid]}
        st = window.state
        for signal in (st.model_changed, st.trace_changed, st.prompt_changed):
            signal.connect(lambda *_: self._rerun())
        window.worker.failed.connect(self._on_failure)
        window.worker.busy_changed.connect(lambda busy: self._rerun() if busy else None)
        self.refresh()

    def set_loading(self, checkpoint: str | None) -> None:
        """Say which checkpoint is loading (the window does not know what the launcher asked for)."""
        self.loading = loading_text(checkpoint)
        self.refresh()

    def _on_failure(self, failure) -> None:
        from transformer_viewer.viewer.worker.requests import LoadRequest, TraceRequest

        if isinstance(failure.request, LoadRequest) and self.window.state.model_info is None:
            self.loading = None  # failed or cancelled: nothing is loading now
            self.refresh()
        elif failure.cancelled and type(failure.request) is TraceRequest and self.window.state.trace is None:
            self.stopped = True
            self.refresh()

    def _rerun(self) -> None:
        """Something new (a prompt, a model, a trace, the worker busy again): not stopped."""
        self.stopped = False
        self.refresh()

    def message(self) -> str | None:
        """What the trace views say now; None when they have a trace to draw."""
        st = self.window.state
        if st.model_info is None:
            return self.loading or NO_MODEL
        if not (st.prompt or "").strip():
            return TYPE_A_PROMPT  # a trace of the cleared prompt is not shown
        if st.trace is not None:
            return None
        return STOPPED if self.stopped else RUNNING

    def refresh(self) -> None:
        text = self.message()
        for view in self.trace_views:
            self.states[id(view)].show_message(text)
        for view in self.prompt_views:
            self.states[id(view)].show_message(text if text == TYPE_A_PROMPT and self.window.state.trace is not None
                                               else None)
        mask_text = None if self.window.state.model_info is not None else text
        self.states[id(self.window.mask_grid)].show_message(mask_text)

    def shown(self, view) -> str | None:
        """The message covering `view`, or None (for tests and screenshots)."""
        state = self.states.get(id(view))
        return state.message() if state is not None else None
