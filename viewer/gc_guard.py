"""Python's cyclic garbage collector, run on the GUI thread only, over the objects that come and go.

The collector runs in whichever thread happens to allocate when a threshold is crossed. When
that is the worker thread (building a model allocates thousands of objects) and the garbage
holds a Qt object, Qt deletes it from the wrong thread and the process dies: a segmentation
fault in "Garbage-collecting" under the load handler, seen about once in ten runs of the
window tests. pyqtgraph's GarbageCollector turns automatic collection off and collects on a
GUI-thread timer instead; every window installs it once.

torch, Qt, pyqtgraph and the window leave about 200,000 long-lived objects, and a collection
over them stalled the GUI thread visibly. The first model load freezes them out of the
collector's sight just before it builds the model (`freeze_startup_objects`, on the worker
thread: a freeze frees nothing, so no Qt object is deleted there). Everything made after that
(models, sessions, traces) stays collectable: the timer's passes and the collection after each
load (`collect_after_load`) cover some tens of thousands of objects, a few milliseconds.
"""

from __future__ import annotations

import gc
import threading

INTERVAL_S = 1.0
_collector = None
_frozen = threading.Event()


def collect_on_gui_thread():
    """Install the timer-driven collector (once per process; call on the GUI thread) and return
    it. Qt is imported here only: the worker side, which freezes, runs headless too."""
    global _collector
    if _collector is None:
        from pyqtgraph.util.garbage_collector import GarbageCollector

        _collector = GarbageCollector(interval=INTERVAL_S)
    return _collector


def freeze_startup_objects() -> None:
    """Put every object alive now out of the collector's sight, once per process: called before
    the first model is built, when what lives is the imported libraries and the window."""
    if not _frozen.is_set():
        _frozen.set()
        gc.freeze()


def collect_after_load() -> None:
    """Collect what the previous model left in reference cycles (GUI thread; frozen objects
    are not scanned)."""
    gc.collect()
