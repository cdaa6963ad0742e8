"""The worker thread: loading, traces, stale answers, cancellation, progress, errors, shutdown."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from tests.helpers.handlers import swap_handler
from tests.helpers.interventions import ablating
from tests.helpers.window import PROMPT, WAIT_MS, reference_session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.errors import CheckpointError, ModelError
from transformer_viewer.viewer.worker.client import NO_MODEL, WorkerClient
from transformer_viewer.viewer.worker.handlers import WorkerSession
from transformer_viewer.viewer.worker.requests import (
    Cancelled,
    LoadRequest,
    LoadResult,
    NewSession,
    Request,
    TraceRequest,
    TraceResult,
)

GATE = threading.Event()  # lets a test hold a handler mid-run


@dataclass(frozen=True)
class SlowRequest(Request):
    kind: ClassVar[str] = "test-slow"
    tag: str = ""
    steps: int = 0


def slow_handler(_session, request, progress, is_cancelled):
    for i in range(request.steps):
        progress(i + 1, request.steps, f"step {i + 1}")
    while not GATE.wait(0.01):
        if is_cancelled():
            raise Cancelled()
    return request.tag


@dataclass(frozen=True)
class BrokenRequest(Request):
    kind: ClassVar[str] = "test-broken"
    error: str = "model"


def broken_handler(_session, request, _progress, _is_cancelled):
    if request.error == "model":
        raise ModelError("the thing is wrong; do the other thing")
    raise ValueError("bug\nwith a second line")


@dataclass(frozen=True)
class SlowLoadRequest(Request):
    """A load (same kind, so a newer LoadRequest supersedes it) that, like the real one, cannot
    be stopped once it runs: it installs a new session whatever happens meanwhile."""

    kind: ClassVar[str] = LoadRequest.kind
    path: str = ""


def slow_load_handler(_session, request, _progress, _is_cancelled):
    GATE.wait(WAIT_MS / 1000)
    loaded = load_checkpoint(request.path)
    session = WorkerSession(loaded)
    return NewSession(session, LoadResult(session.info()))


HOLD = threading.Event()  # holds the watching handler until the test has superseded or cancelled it
SEEN: list = []


@dataclass(frozen=True)
class WatchRequest(Request):
    kind: ClassVar[str] = "test-watch"
    tag: str = ""


def watch_handler(_session, request, _progress, is_cancelled):
    HOLD.wait(5)
    SEEN.append((request.tag, is_cancelled(), is_cancelled.newer))
    if is_cancelled():
        raise Cancelled()
    return request.tag


@pytest.fixture(autouse=True)
def _test_routes(monkeypatch):
    """This file's own request types, routed for each of its tests."""
    for request_type, handler in ((SlowRequest, slow_handler), (WatchRequest, watch_handler),
                                  (SlowLoadRequest, slow_load_handler), (BrokenRequest, broken_handler),
                                  (NiceRequest, nice_handler)):
        swap_handler(monkeypatch, request_type, handler, needs_session=False)


class Collector:
    def __init__(self, client):
        self.results, self.failures, self.progress = [], [], []
        client.result.connect(self.results.append)
        client.failed.connect(self.failures.append)
        client.progress.connect(self.progress.append)


@pytest.fixture
def client(qtbot):
    c = WorkerClient()
    yield c
    GATE.set()
    c.close()
    assert c.thread.isFinished()


def _answered(col, n):
    return lambda: len(col.results) + len(col.failures) >= n


def test_load_then_trace_matches_a_direct_session(qtbot, client, tiny_ckpt):
    col = Collector(client)
    client.submit(LoadRequest(path=tiny_ckpt, device="cpu"))
    client.submit(TraceRequest(text=PROMPT))
    qtbot.waitUntil(_answered(col, 2), timeout=WAIT_MS)
    assert not col.failures
    info, result = col.results[0].value.info, col.results[1].value
    assert (info.n_layer, info.n_head, info.block_size) == (2, 4, 64) and info.device == "cpu"
    assert isinstance(result, TraceResult) and result.trace is result.clean  # nothing masked
    expected = reference_session(tiny_ckpt).run()
    assert result.trace.attention is None  # the worker keeps overviews; patterns come on demand
    # One overview cell per token at this length: the overview is the pattern, in float16.
    np.testing.assert_allclose(result.trace.overview_max.astype(np.float32), expected.attention.astype(np.float32),
                               atol=1e-3)
    np.testing.assert_allclose(result.clean.next.probs, expected.next.probs, atol=1e-6)
    assert result.trace.labels == expected.labels


def test_masked_trace_keeps_the_clean_baseline_and_reuses_early_layers(qtbot, client, tiny_ckpt):
    col = Collector(client)
    client.submit(LoadRequest(path=tiny_ckpt, device="cpu"))
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 2] = True
    client.submit(TraceRequest(text=PROMPT, intervention=ablating(mask)))
    qtbot.waitUntil(_answered(col, 2), timeout=WAIT_MS)
    result = col.results[1].value
    assert result.trace is not result.clean
    assert result.trace.first_layer_run == 1  # layer 0 came from the clean run's cache
    assert result.trace.mask[1, 2] and not result.clean.mask.any()
    expected = reference_session(tiny_ckpt).predict(mask)
    np.testing.assert_allclose(result.trace.next.probs, expected.probs, atol=1e-6)


def test_stale_result_is_dropped_and_superseded_run_cancelled(qtbot, client):
    GATE.clear()
    col = Collector(client)
    first = client.submit(SlowRequest(tag="old"))
    qtbot.waitUntil(lambda: client._queue._running is not None, timeout=WAIT_MS)  # the old one is running
    second = client.submit(SlowRequest(tag="new"))
    assert second.rid > first.rid
    GATE.set()
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    assert [r.value for r in col.results] == ["new"]
    assert not col.failures  # the old one's "cancelled" answer was stale too
    assert client.dropped == 1


def test_waiting_requests_of_one_kind_collapse_to_the_newest(qtbot, client):
    GATE.clear()
    col = Collector(client)
    client.submit(SlowRequest(tag="running"))
    qtbot.waitUntil(lambda: client._queue._running is not None, timeout=WAIT_MS)
    for i in range(5):
        client.submit(SlowRequest(tag=f"queued {i}"))
    GATE.set()
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    assert [r.value for r in col.results] == ["queued 4"]


def test_progress_and_cancel(qtbot, client):
    GATE.clear()
    col = Collector(client)
    client.submit(SlowRequest(tag="x", steps=3))
    qtbot.waitUntil(lambda: any(p.done == 3 for p in col.progress), timeout=WAIT_MS)
    assert col.progress[-1].total == 3 and col.progress[-1].text == "step 3"
    client.cancel("test-slow")
    qtbot.waitUntil(lambda: bool(col.failures), timeout=WAIT_MS)
    assert col.failures[0].cancelled and not col.results
    assert not client.busy


def test_the_cancel_flag_names_the_request_that_superseded_it(qtbot, client):
    HOLD.clear()
    SEEN.clear()
    client.submit(WatchRequest(tag="first"))
    qtbot.waitUntil(lambda: client._queue._running is not None, timeout=WAIT_MS)
    second = client.submit(WatchRequest(tag="second"))
    HOLD.set()
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    assert [s[:2] for s in SEEN] == [("first", True), ("second", False)]
    assert SEEN[0][2].rid == second.rid and SEEN[1][2] is None


def test_a_user_cancel_leaves_no_newer_request_to_finish_for(qtbot, client):
    HOLD.clear()
    SEEN.clear()
    client.submit(WatchRequest(tag="first"))
    qtbot.waitUntil(lambda: client._queue._running is not None, timeout=WAIT_MS)
    client.submit(WatchRequest(tag="second"))
    client.cancel("test-watch")  # drops the waiting one too: nothing will start from the first's work
    HOLD.set()
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    assert SEEN == [("first", True, None)]


def test_a_request_cancelled_before_it_ran_hears_so(qtbot, client):
    """Its callbacks get a cancelled failure, as a running request's do when it stops."""
    GATE.clear()
    col = Collector(client)
    heard = []
    client.submit(SlowRequest(tag="running"))
    qtbot.waitUntil(lambda: client._queue._running is not None, timeout=WAIT_MS)
    waiting = client.submit(WatchRequest(tag="waiting"), on_result=heard.append, on_failure=heard.append)
    client.cancel("test-watch")  # it never started: the slow one holds the worker
    assert [(f.request.rid, f.cancelled) for f in heard] == [(waiting.rid, True)]
    assert [f.request.rid for f in col.failures] == [waiting.rid] and client.busy
    GATE.set()
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    assert [r.value for r in col.results] == ["running"] and len(heard) == 1


def test_errors_come_back_as_one_line(qtbot, client):
    col = Collector(client)
    client.submit(BrokenRequest(error="model"))
    qtbot.waitUntil(lambda: len(col.failures) == 1, timeout=WAIT_MS)
    client.submit(BrokenRequest(error="bug"))
    qtbot.waitUntil(lambda: len(col.failures) == 2, timeout=WAIT_MS)
    assert col.failures[0].message == "the thing is wrong; do the other thing"
    assert "\n" not in col.failures[1].message and "ValueError" in col.failures[1].message


def test_requests_that_need_a_model_say_so(qtbot, client):
    col = Collector(client)
    client.submit(TraceRequest(text="hi"))
    qtbot.waitUntil(lambda: bool(col.failures), timeout=WAIT_MS)
    assert col.failures[0].message == NO_MODEL


def test_a_bad_checkpoint_keeps_the_loaded_model(qtbot, client, tiny_ckpt, tmp_path):
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError) as loader_error:
        load_checkpoint(str(bad))
    col = Collector(client)
    client.submit(LoadRequest(path=tiny_ckpt, device="cpu"))
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    session = client.worker.session
    assert session is not None
    client.submit(LoadRequest(path=str(bad), device="cpu"))
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    assert col.failures[-1].message == str(loader_error.value)
    assert client.worker.session is session
    client.submit(TraceRequest(text=PROMPT))
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    assert isinstance(col.results[-1].value, TraceResult)


def test_a_superseded_load_that_finished_still_reaches_the_gui(qtbot, client, tiny_ckpt, tmp_path):
    """Load A runs; load B (a bad file) is submitted; A finishes anyway and the worker now holds
    A's model. Dropping A's answer as stale left the window describing the old model while the
    worker ran A's (every trace then failed on the mask shape; found by the monkey test)."""
    GATE.clear()
    col = Collector(client)
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"\x00" * 100)
    first = client.submit(SlowLoadRequest(path=tiny_ckpt))
    qtbot.waitUntil(lambda: client._queue._running is not None, timeout=WAIT_MS)
    client.submit(LoadRequest(path=str(bad), device="cpu"))
    GATE.set()
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    assert [type(r.value) for r in col.results] == [LoadResult] and col.results[0].request.rid == first.rid
    assert col.results[0].value.info == client.worker.session.info()
    assert len(col.failures) == 1 and "broken.safetensors" in col.failures[0].message


def test_close_stops_the_thread(qtbot, tiny_ckpt):
    c = WorkerClient()
    c.submit(LoadRequest(path=tiny_ckpt, device="cpu"))
    qtbot.waitUntil(lambda: not c.busy, timeout=WAIT_MS)
    assert c.thread.isRunning()
    assert c.close()
    assert c.thread.isFinished() and c.worker.session is None
    with pytest.raises(RuntimeError):
        c.submit(TraceRequest(text="x"))


@dataclass(frozen=True)
class NiceRequest(Request):
    kind: ClassVar[str] = "test-nice"


def nice_handler(_session, _request, _progress, _is_cancelled):
    import os

    import torch

    def nice_of(tid: int) -> int:
        return int(open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()[16])

    torch.randn(512, 512) @ torch.randn(512, 512)  # the worker's OpenMP team exists from here on
    def name_of(tid: int) -> str:
        return open(f"/proc/self/task/{tid}/comm").read().strip()

    tids = [int(t) for t in os.listdir("/proc/self/task")]
    return {t: (nice_of(t), name_of(t)) for t in tids}, threading.get_native_id()



@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="thread nice values are Linux's")
def test_the_worker_thread_and_its_compute_threads_yield_to_the_gui_thread(qtbot, client):
    import os

    with qtbot.waitSignal(client.result, timeout=WAIT_MS) as blocker:
        client.submit(NiceRequest())
    threads, worker_tid = blocker.args[0].value
    gui = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert threads[worker_tid][0] > gui
    assert threads[threading.get_native_id()][0] == gui  # the GUI thread keeps its own
    # Threads the worker started (torch's compute team, named after it) inherit its priority.
    started = [nice for tid, (nice, name) in threads.items() if name == threads[worker_tid][1]]
    assert started and all(nice == threads[worker_tid][0] for nice in started)
