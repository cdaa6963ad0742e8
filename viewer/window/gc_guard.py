"""Python's cyclic garbage collector, run on the GUI thread only.

The collector runs in whichever thread happens to allocate when a threshold is crossed. When
that is the worker thread (building a model allocates thousands of objects) and the garbage
holds a Qt object, Qt deletes it from the wrong thread and the process dies: a segmentation
fault in "Garbage-collecting" under the load handler, seen about once in ten runs of the
window tests. pyqtgraph's GarbageCollector turns automatic collection off and collects on a
GUI-thread timer instead; every window installs it once.
"""

from __future__ import annotations

from pyqtgraph.util.garbage_collector import GarbageCollector

INTERVAL_S = 1.0
_collector: GarbageCollector | None = None


def collect_on_gui_thread() -> GarbageCollector:
    """Install the timer-driven collector (once per process; call on the GUI thread)."""
    global _collector
    if _collector is None:
        _collector = GarbageCollector(interval=INTERVAL_S)
    return _collector
