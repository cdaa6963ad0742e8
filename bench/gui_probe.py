"""Measurement 4a, in its own process (offscreen Qt): redraw of the attention heatmap and of the
heads grid after a new trace, with traces our Session captured from the bench model.

    python bench/gui_probe.py FOLDER THREADS REPS T [T ...]

A redraw is `set_data` / `set_patterns` with a new trace's arrays, then a synchronous repaint
of the view's viewport. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import common  # noqa: E402
import numpy as np  # noqa: E402


def timed(fn, n: int, warmup: int = 3) -> dict:
    for i in range(warmup):  # font, pixmap and colormap caches fill on the first frames
        fn(i)
    wall, cpu = [], []
    for i in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(warmup + i)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"median_s": statistics.median(wall), "cpu_median_s": statistics.median(cpu), "min_s": min(wall),
            "max_s": max(wall), "n": n}


def main(folder: str, threads: int, reps: int, lengths: list[int]) -> dict:
    common.set_threads(threads)
    from PySide6 import QtWidgets

    from transformer_viewer.model.session import Session
    from transformer_viewer.viewer.views.head_grid import HeadGridView
    from transformer_viewer.viewer.views.heatmap import HeatmapView

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    loaded, _ = common.load_ours(folder)
    session = Session(loaded, keep_full=True)  # what the window keeps today: every full pattern
    L, nh = loaded.config.n_layer, loaded.config.n_head
    rows = []
    for T in lengths:
        session.set_tokens(common.prompt_tokens(T))
        clean = session.run()
        mask = np.zeros((L, nh), dtype=bool)
        mask[0, 0] = True
        masked = session.run(mask)  # a second, different trace, as after a toggle
        traces = (clean, masked)
        labels = clean.labels

        heat = HeatmapView()
        heat.resize(900, 820)
        heat.show()
        heat.set_data(clean.attention[0, 0], labels, labels)
        app.processEvents()

        def redraw(i, heat=heat, traces=traces, labels=labels):
            trace = traces[i % 2]
            layer, head = (i // 2) % L, i % nh
            heat.set_data(trace.attention[layer, head], labels, labels, title=f"layer {layer} head {head}")
            heat.graphics.viewport().repaint()

        grid = HeadGridView()
        grid.resize(520, 520)
        grid.show()
        grid.set_patterns(clean.attention)
        app.processEvents()

        def regrid(i, grid=grid, traces=traces):
            grid.set_patterns(traces[i % 2].attention)
            grid.graphics.viewport().repaint()

        rows.append({"tokens": T, "heatmap": timed(redraw, reps), "grid": timed(regrid, max(3, reps // 2))})
        heat.close()
        grid.close()
        app.processEvents()
        session.set_tokens(common.prompt_tokens(1))
    return {"rows": rows}


if __name__ == "__main__":
    folder, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(main(folder, threads, reps, [int(a) for a in sys.argv[4:]])), flush=True)
