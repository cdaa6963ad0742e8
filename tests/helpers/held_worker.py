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
    """A ViewerState holding `prompt`'s clean trace with its log-probabilities, as the window
    has it after a run: made by the window's run controller on an inline worker."""
    from transformer_viewer.viewer.controller import RunController
    from transformer_viewer.viewer.state import ViewerState

    st = ViewerState()
    controller = RunController(st, InlineWorker(session), st, follow=False)
    st.set_model(session.info())
    st.set_prompt(prompt)
    controller.run()
    return st
