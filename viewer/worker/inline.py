"""Requests answered at once on the calling thread: the export command's stand-in for the
worker thread, so a view built for the window exports through the same requests and handlers.

`submit` runs the handler before it returns and calls the callbacks from inside it; an error
is raised to the caller (the command line turns a `ModelError` into its one-line message).

A view asks from inside Qt's event handling (a show or resize event), where an exception cannot
reach the command: Qt prints it as a traceback, or the process dies. `hold_errors()` keeps such
errors instead: the request's `on_failure` hears of it as from the worker thread, and
`raise_held()` raises the first once control is back with the command.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from transformer_viewer.viewer.worker.registry import lookup_handler
from transformer_viewer.viewer.worker.requests import Failure, NewSession, Progress, Request, Result


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
        self._holding = False
        self.held: list[BaseException] = []  # errors kept while holding, first first

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
        try:
            value = handler(self.session, request, progress, lambda: False)
        except Exception as e:
            if not self._holding:
                raise
            self.held.append(e)
            if on_failure is not None:
                # Imported here: the worker side imports no Qt, and holding is for a command with a window.
                from transformer_viewer.viewer.worker.client import describe_error

                on_failure(Failure(request, describe_error(e)))
            return InlineHandle(request)
        if isinstance(value, NewSession):
            self.session, value = value.session, value.value
        if on_result is not None:
            on_result(Result(request, value))
        return InlineHandle(request)

    def cancel(self, kind: str | None = None) -> None:
        pass

    def hold_errors(self) -> None:
        """From now on keep a handler's error (see the module's docstring) instead of raising it."""
        self._holding = True

    def raise_held(self) -> None:
        """Raise the first error kept since `hold_errors` (nothing when there is none)."""
        if self.held:
            raise self.held[0]
