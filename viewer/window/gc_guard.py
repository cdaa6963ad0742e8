"""Python's cyclic garbage collector, run on the GUI thread only.

The collector runs in whichever thread happens to allocate when a threshold is crossed. When
that is the worker thread (building a model allocates thousands of objects) and the garbage
holds a Qt object, Qt deletes it from the wrong thread and the process dies: a segmentation
fault in "Garbage-collecting" under the load handler, seen about once in ten runs of the
window tests. pyqtgraph's GarbageCollector turns automatic collection off and collects on a
GUI-thread timer instead; every window installs it once. After each model load, what is alive
is frozen out of the collector's sight, so its periodic passes stay short (`settle_long_lived`).
"""

from __future__ import annotations

import gc

from pyqtgraph.util.garbage_collector import GarbageCollector

INTERVAL_S = 1.0
_collector: GarbageCollector | None = None


def collect_on_gui_thread() -> GarbageCollector:
    """Install the timer-driven collector (once per process; call on the GUI thread)."""
    global _collector
    if _collector is None:
        _collector = GarbageCollector(interval=INTERVAL_S)
    return _collector


def settle_long_lived() -> None:
    """Collect once, then put every surviving object out of the collector's sight (gc.freeze).

    torch, Qt, pyqtgraph and a loaded model leave about 220,000 long-lived objects, and a full
    collection over them took 140 ms on the GUI thread: a stall every few traces, whenever the
    timer above ran the oldest generation. Over what is left after a freeze, under a
    millisecond. Called on the GUI thread when a model has loaded; unfrozen first, so whatever
    the previous model left in reference cycles is still collected then.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()
