"""The worker thread yields the CPU to the GUI thread.

On a machine with as many busy threads as cores (torch's team on every core while a capture
runs), the GUI thread waits for a time slice like any other thread, and a redraw of a few
milliseconds of its own work takes a hundred of wall time. A lower priority for the worker
thread, taken before its first parallel region so the OpenMP team it starts inherits it, lets
the scheduler run the GUI thread as soon as it has work; when the GUI is idle the worker still
gets every core.
"""

from __future__ import annotations

import os
import sys
import threading

NICE_STEP = 5  # weight 1024 -> 335 under Linux's fair scheduler: the GUI thread gets 3/4 of a contended core


def lower_this_thread() -> None:
    """Lower the calling thread's priority (and that of the threads it starts from now on)."""
    if sys.platform.startswith("linux"):
        tid = threading.get_native_id()  # Linux's nice is per thread: PRIO_PROCESS with a thread id
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + NICE_STEP))
        except OSError:  # a sandbox that forbids it: the worker keeps its priority
            pass
        return
    from PySide6.QtCore import QThread

    thread = QThread.currentThread()
    if thread is not None:
        thread.setPriority(QThread.Priority.LowPriority)
