"""Garbage collection happens on the GUI thread only (viewer/gc_guard.py): a collection run by
the worker thread can free a Qt object from the wrong thread and kill the process."""

from __future__ import annotations

import gc
import threading

from tests.helpers.window import new_window, wait_idle
from transformer_viewer.viewer.gc_guard import INTERVAL_S


class Cycle:
    def __init__(self):
        self.me = self


def test_the_worker_thread_never_runs_the_collector(qtbot, tmp_path, tiny_ckpt, other_ckpt):
    threads: list[str] = []

    def seen(phase, _info):
        if phase == "start":
            threads.append(threading.current_thread().name)

    gc.callbacks.append(seen)
    try:
        window = new_window(qtbot, tmp_path, tiny_ckpt)
        for i in range(3):  # loading builds thousands of objects on the worker: collections fall due there
            window.load(other_ckpt if i % 2 == 0 else tiny_ckpt)
            window.prompt_editor.set_text(f"prompt number {i} " * (i + 1))
            wait_idle(qtbot, window, lambda i=i: window.state.trace is not None
                      and window.state.trace.text == f"prompt number {i} " * (i + 1))
        garbage = [Cycle() for _ in range(5000)]  # cyclic garbage the timer must still collect
        del garbage
        qtbot.wait(int(3 * INTERVAL_S * 1000))
        window.close()
    finally:
        gc.callbacks.remove(seen)
    assert not gc.isenabled()  # automatic collection (any thread) is off ...
    assert threads  # ... and the GUI thread's timer does collect ...
    assert set(threads) == {threading.main_thread().name}  # ... and nothing else does


def test_startup_objects_are_frozen_once_and_models_stay_collectable(qtbot, tmp_path, tiny_ckpt, other_ckpt):
    import weakref

    window = new_window(qtbot, tmp_path, tiny_ckpt)
    frozen = gc.get_freeze_count()
    assert frozen > 0  # the libraries and the window are out of the periodic passes
    model = window.worker.worker.session.model  # read while the worker is idle
    tracked = {id(o) for o in gc.get_objects()}  # what the collector still scans (not the frozen)
    assert id(model) in tracked and id(model.blocks[0].attn) in tracked
    gone = weakref.ref(model)
    cycle = Cycle()  # garbage in a cycle, made after the first load: the next load collects it
    cycle_gone = weakref.ref(cycle)
    del model, cycle, tracked
    window.load(other_ckpt)
    wait_idle(qtbot, window, lambda: window.state.model_info is not None and window.state.model_info.n_head == 2)
    assert gone() is None and cycle_gone() is None
    assert gc.get_freeze_count() == frozen  # nothing more frozen: models come and go
    window.close()
