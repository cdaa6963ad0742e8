"""A worker for view tests that holds the requests views submit until the test answers them, in
any order, with the real handlers (an InlineWorker underneath): how a test delivers an answer
that arrives after the view asked for something else."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from transformer_viewer.viewer.worker.inline import InlineWorker


@dataclass
class Held:
    request: object
    on_result: object
    on_failure: object


class HeldWorker:
    """`submit` records; `answer(i)` runs request i's handler and calls its view back."""

    def __init__(self, session):
        self.inline = InlineWorker(session)
        self.session = session
        self.held: list[Held] = []
        self.busy = False

    def submit(self, request, on_result=None, on_failure=None, on_progress=None):
        self.held.append(Held(request, on_result, on_failure))
        return SimpleNamespace(request=request, done=False, cancel=lambda: None)

    def of_kind(self, kind: str) -> list[Held]:
        return [h for h in self.held if h.request.kind == kind]

    def answer(self, held: Held) -> None:
        self.inline.submit(held.request, on_result=held.on_result, on_failure=held.on_failure)

    def cancel(self, kind: str | None = None) -> None:
        pass


def state_with_trace(session, prompt: str):
    """A ViewerState holding `prompt`'s clean trace, as the window has it after a run."""
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.worker.requests import TraceRequest

    worker = InlineWorker(session)
    st = ViewerState()
    st.set_model(session.info())
    st.set_prompt(prompt)
    traced = []
    worker.submit(TraceRequest(text=prompt), on_result=traced.append)
    st.set_traces(traced[0].value.trace, traced[0].value.clean)
    return st
