"""The worker thread's lower priority: taken by the calling thread alone, inherited by the
threads it starts afterwards (Linux: nice per thread)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from transformer_viewer.viewer.worker.priority import NICE_STEP, lower_this_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread nice values are Linux's")


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_the_calling_thread_and_the_threads_it_starts_get_the_lower_priority():
    seen = {}

    def child():
        seen["child"] = nice_of(threading.get_native_id())

    def worker():
        seen["before"] = nice_of(threading.get_native_id())
        lower_this_thread()
        seen["after"] = nice_of(threading.get_native_id())
        t = threading.Thread(target=child)
        t.start()
        t.join()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["after"] == min(19, seen["before"] + NICE_STEP)
    assert seen["child"] == seen["after"]
    assert nice_of(threading.get_native_id()) == seen["before"]  # this thread keeps its own
