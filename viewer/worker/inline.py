"""Requests answered at once on the calling thread: the export command's stand-in for the
worker thread, so a view built for the window exports through the same requests and handlers.

`submit` runs the handler before it returns and calls the callbacks from inside it; an error
is raised to the caller (the command line turns a `ModelError` into its one-line message).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from transformer_viewer.viewer.worker.registry import lookup_handler
from transformer_viewer.viewer.worker.requests import NewSession, Progress, Request, Result


class InlineHandle:
    def __init__(self, request: Request):
        self.request = request
        self.done = True

    @property
    def rid(self) -> int:
        return self.request.rid

    def cancel(self) -> None:
        pass  # already answered


class InlineWorker:
    """`session` is a `WorkerSession`; `report(Progress)` also sees every progress step (a bar)."""

    def __init__(self, session, report: Callable[[Progress], None] | None = None):
        self.session = session
        self.report = report
        self.busy = False
        self._rid = 0

    def submit(self, request: Request, on_result=None, on_failure=None, on_progress=None) -> InlineHandle:
        self._rid += 1
        request = replace(request, rid=self._rid)

        def progress(done: float, total: float = 0, text: str = "") -> None:
            p = Progress(request, float(done), float(total), str(text))
            if on_progress is not None:
                on_progress(p)
            if self.report is not None:
                self.report(p)

        handler, _needs_session = lookup_handler(type(request))
        value = handler(self.session, request, progress, lambda: False)
        if isinstance(value, NewSession):
            self.session, value = value.session, value.value
        if on_result is not None:
            on_result(Result(request, value))
        return InlineHandle(request)

    def cancel(self, kind: str | None = None) -> None:
        pass
