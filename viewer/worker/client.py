"""One worker thread owns the model; the GUI talks to it only through `WorkerClient`.

A handler that fails in any way (a Rust library's panic, a BaseException, included; only
KeyboardInterrupt and SystemExit pass) answers its request with a one-line failure, and the
thread goes on serving.

`WorkerClient.submit(request, on_result=..., on_failure=..., on_progress=...)` stamps the
request with a fresh id, queues it and returns its `RequestHandle`: that request's result,
failure (a cancelled one too), and progress come back to those callbacks, on the GUI thread,
and to no one else. The queue holds at most one waiting request per kind: a newer one replaces
the waiting one and cancels a running one of the same kind (its `is_cancelled()` turns True).
An answer to a request older than the newest of its kind is dropped (`dropped` counts them), so
a view never sees a stale trace. The one exception is a result saying the worker's model
changed (a load or device move that finished before a newer request of its kind could stop
it): the worker now holds that model, so its handle hears of it, stale or not.

The client's own `result`, `failed` and `progress` signals repeat every delivered answer for
observers that are not views (the status bar, logs, tests). `close()` cancels everything,
stops the thread and waits for it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from transformer_viewer.model.rust_calls import detail_of, is_panic
from transformer_viewer.viewer.worker.priority import lower_this_thread
from transformer_viewer.viewer.worker.registry import lookup_handler
from transformer_viewer.viewer.worker.requests import (
    Cancelled,
    Failure,
    LoadResult,
    NewSession,
    Progress,
    Request,
    Result,
)

log = logging.getLogger(__name__)
PROGRESS_INTERVAL_S = 0.05  # at most ~20 progress signals a second reach the GUI
NO_MODEL = "no model is loaded; open a checkpoint with File > Open checkpoint"


@dataclass
class _Job:
    request: Request
    cancel: threading.Event
    newer: Request | None = None  # the request of its kind that superseded it while it ran


class CancelFlag:
    """The `is_cancelled()` a handler polls: true once its job is cancelled. `newer` is the
    request of the same kind that superseded it, None when the user (or closing) cancelled it:
    a handler whose work the newer request would redo may finish that part first."""

    def __init__(self, job: _Job):
        self._job = job

    def __call__(self) -> bool:
        return self._job.cancel.is_set()

    @property
    def newer(self) -> Request | None:
        return self._job.newer


class _Queue:
    """Waiting jobs, one per kind, and the running one. Shared by both threads, under a lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending: dict[str, _Job] = {}
        self._running: _Job | None = None

    def put(self, request: Request) -> Request | None:
        """Queue `request`; returns the waiting request it replaced, if any."""
        with self._lock:
            old = self._pending.pop(request.kind, None)
            if self._running is not None and self._running.request.kind == request.kind:
                self._running.newer = request  # before the flag: a handler that sees it set sees this
                self._running.cancel.set()
            self._pending[request.kind] = _Job(request, threading.Event())
            return old.request if old else None

    def take(self) -> _Job | None:
        with self._lock:
            if not self._pending:
                self._running = None
                return None
            kind = min(self._pending, key=lambda k: self._pending[k].request.rid)  # oldest first
            self._running = self._pending.pop(kind)
            return self._running

    def cancel(self, kind: str | None = None) -> list[Request]:
        """Cancel the running job and drop waiting ones (of `kind`, or all); returns those dropped."""
        with self._lock:
            if self._running is not None and kind in (None, self._running.request.kind):
                self._running.newer = None  # nothing waits to start from its work now: it stops
                self._running.cancel.set()
            kinds = list(self._pending) if kind is None else [kind]
            return [self._pending.pop(k).request for k in kinds if k in self._pending]


class Worker(QObject):
    """Lives on the worker thread; runs queued jobs through the handler table."""

    result = Signal(object)
    failed = Signal(object)
    progress = Signal(object)

    def __init__(self, queue: _Queue):
        super().__init__()
        self.queue = queue
        self.session = None  # WorkerSession, created by the load handler

    @Slot()
    def drain(self) -> None:
        while (job := self.queue.take()) is not None:
            self._run(job)

    def _run(self, job: _Job) -> None:
        request = job.request
        t0 = time.perf_counter()
        last = [0.0]

        def progress(done: float, total: float = 0, text: str = "") -> None:
            now = time.perf_counter()
            if now - last[0] >= PROGRESS_INTERVAL_S or (total and done >= total):
                last[0] = now
                self.progress.emit(Progress(request, float(done), float(total), str(text)))

        try:
            handler, needs_session = lookup_handler(type(request))
            if needs_session and self.session is None:
                raise _UserError(NO_MODEL)
            value = handler(self.session, request, progress, CancelFlag(job))
            if isinstance(value, NewSession):
                self.session = value.session  # only now: a failed load keeps the old model
                value = value.value
        except Cancelled:
            self.failed.emit(Failure(request, "cancelled", cancelled=True))
            return
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - every failure (a Rust panic too) becomes one line for the GUI
            self.failed.emit(Failure(request, describe_error(e)))
            return
        self.result.emit(Result(request, value, (time.perf_counter() - t0) * 1000.0))


class _UserError(Exception):
    pass


def describe_error(e: BaseException) -> str:
    """One line for the user. Our own errors carry their message; anything else is a bug,
    logged in full, shown briefly."""
    from transformer_viewer.model.errors import ModelError  # no torch: errors.py is plain

    if isinstance(e, (ModelError, _UserError)):
        return _one_line(str(e))
    if isinstance(e, MemoryError) or "out of memory" in str(e).lower():
        return "out of memory; use a shorter prompt, a smaller model, or the CPU"
    log.error("worker handler failed:\n%s", "".join(traceback.format_exception(e)))
    if is_panic(e):
        return _one_line(f"a library the model uses panicked ({detail_of(e)}); the previous state is kept")
    return _one_line(f"internal error ({type(e).__name__}: {e}); the previous state is kept")


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 400 else line[:399] + "…"


class RequestHandle:
    """One submitted request: where its answer goes. Callbacks run on the GUI thread; set them
    at `submit` or later with `then` (before control returns to the event loop)."""

    def __init__(self, client: WorkerClient, request: Request):
        self._client = client
        self.request = request
        self.done = False  # answered, dropped as stale, or cancelled before it ran
        self._on_result: Callable[[Result], None] | None = None
        self._on_failure: Callable[[Failure], None] | None = None
        self._on_progress: Callable[[Progress], None] | None = None

    @property
    def rid(self) -> int:
        return self.request.rid

    def then(self, on_result=None, on_failure=None, on_progress=None) -> RequestHandle:
        self._on_result = on_result or self._on_result
        self._on_failure = on_failure or self._on_failure
        self._on_progress = on_progress or self._on_progress
        return self

    def cancel(self) -> None:
        """Stop this request (if it is still the newest of its kind); its failure says cancelled."""
        if not self.done and self._client.is_latest(self.request):
            self._client.cancel(self.request.kind)

    def _deliver(self, answer) -> None:
        self.done = True
        callback = self._on_result if isinstance(answer, Result) else self._on_failure
        if callback is not None:
            callback(answer)

    def _report(self, progress: Progress) -> None:
        if self._on_progress is not None:
            self._on_progress(progress)


class WorkerClient(QObject):
    """The GUI thread's handle on the worker thread."""

    result = Signal(object)  # Result, after its handle got it
    failed = Signal(object)  # Failure, after its handle got it
    progress = Signal(object)  # Progress
    busy_changed = Signal(bool)
    _wake = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._latest: dict[str, int] = {}
        self._handles: dict[int, RequestHandle] = {}  # outstanding requests by id
        self.dropped = 0  # stale answers thrown away (tests look at it)
        self._queue = _Queue()
        self.thread = QThread()
        self.thread.setObjectName("transformer-viewer worker")
        self.worker = Worker(self._queue)
        self.worker.moveToThread(self.thread)
        self._wake.connect(self.worker.drain)  # queued: the worker lives on the other thread
        self.worker.result.connect(self._on_answer)
        self.worker.failed.connect(self._on_answer)
        self.worker.progress.connect(self._on_progress)
        # Run on the new thread as it starts, before it computes anything.
        self.thread.started.connect(lower_this_thread, Qt.ConnectionType.DirectConnection)
        self.thread.start()
        self._closed = False

    @property
    def busy(self) -> bool:
        return bool(self._handles)

    def submit(self, request: Request, on_result=None, on_failure=None, on_progress=None) -> RequestHandle:
        """Queue `request` (stamped with a new id) for the worker; its answer goes to the callbacks."""
        if self._closed:
            raise RuntimeError("the worker is closed")
        request = replace(request, rid=next(self._ids))
        handle = RequestHandle(self, request).then(on_result, on_failure, on_progress)
        was_busy = self.busy
        self._latest[request.kind] = request.rid
        replaced = self._queue.put(request)
        if replaced is not None:
            self._retire(replaced.rid)
        self._handles[request.rid] = handle
        self._wake.emit()
        if not was_busy:
            self.busy_changed.emit(True)
        return handle

    def cancel(self, kind: str | None = None) -> None:
        """Stop the running request (of `kind`, or any kind). One still waiting to start is
        answered at once with a cancelled failure, as a running one is when it stops: whoever
        asked hears of it (a view waiting for it would otherwise wait for ever)."""
        dropped = self._queue.cancel(kind)
        for request in dropped:
            self._on_answer(Failure(request, "cancelled", cancelled=True))
        if not dropped and not self.busy:
            self.busy_changed.emit(False)

    def _retire(self, rid: int) -> None:
        handle = self._handles.pop(rid, None)
        if handle is not None:
            handle.done = True

    def is_latest(self, request: Request) -> bool:
        return request.rid >= self._latest.get(request.kind, 0)

    @Slot(object)
    def _on_answer(self, answer) -> None:
        was_busy = self.busy
        handle = self._handles.pop(answer.request.rid, None)
        model_changed = isinstance(answer, Result) and isinstance(answer.value, LoadResult)
        if self.is_latest(answer.request) or model_changed:
            if handle is not None:
                handle._deliver(answer)
            (self.result if isinstance(answer, Result) else self.failed).emit(answer)
        else:
            if handle is not None:
                handle.done = True
            self.dropped += 1
        if was_busy and not self.busy:
            self.busy_changed.emit(False)

    @Slot(object)
    def _on_progress(self, progress: Progress) -> None:
        if self.is_latest(progress.request):
            handle = self._handles.get(progress.request.rid)
            if handle is not None:
                handle._report(progress)
            self.progress.emit(progress)

    def close(self, timeout_ms: int | None = None) -> bool:
        """Cancel all, stop the thread and wait for it (a capture or a load stops within
        milliseconds, other work in flight runs to its end, and destroying a running QThread
        aborts the process);
        True when it has finished."""
        if self._closed:
            return self.thread.isFinished()
        self._closed = True
        self._queue.cancel()
        for rid in list(self._handles):
            self._retire(rid)
        self.thread.quit()
        finished = self.thread.wait() if timeout_ms is None else self.thread.wait(timeout_ms)
        if finished:
            self.worker.session = None  # free the model now, not at interpreter exit
        return finished
