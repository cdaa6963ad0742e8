"""Measurement 4a, in its own process (offscreen Qt): redraw of the attention heatmap and of the
heads grid after a new trace, with traces our Session captured from the bench model as the
window keeps them: the heatmap of the whole prompt and the grid draw the pooled overviews
(the pattern itself up to 256 tokens); a zoom draws a 256 x 256 tile recomputed on demand.

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
    from PySide6 import QtCore, QtWidgets

    from transformer_viewer.model.capture.on_demand import pattern_tile
    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.viewer.views.head_grid import HeadGridView
    from transformer_viewer.viewer.views.heatmap import HeatmapView

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    loaded, _ = common.load_ours(folder)
    session = Session(loaded)  # what the window keeps: overviews, patterns on demand
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
        cells = labels[::clean.overview_cell]  # the first token of each overview cell

        heat = HeatmapView()
        heat.resize(900, 820)
        heat.show()
        heat.set_data(clean.overview_max[0, 0], cells, cells)
        app.processEvents()

        def redraw(i, heat=heat, traces=traces, cells=cells):
            trace = traces[i % 2]
            layer, head = (i // 2) % L, i % nh
            heat.set_data(trace.overview_max[layer, head], cells, cells, title=f"layer {layer} head {head}")
            heat.graphics.viewport().repaint()

        grid = HeadGridView()
        grid.resize(520, 520)
        grid.show()
        grid.set_patterns(clean.overview_max)
        app.processEvents()

        def regrid(i, grid=grid, traces=traces):
            grid.set_patterns(traces[i % 2].overview_max)
            grid.graphics.viewport().repaint()

        side = min(T, 256)

        def zoom(i, heat=heat, trace=clean, side=side, T=T, labels=labels):
            # A zoom's full-resolution tile: recomputed on demand, then drawn.
            r0 = (i * 97) % (T - side + 1)
            tile = pattern_tile(session, trace, L - 1, i % nh, (r0, r0 + side), (r0, r0 + side))
            heat.set_data(tile, labels[r0:r0 + side], labels[r0:r0 + side])
            heat.graphics.viewport().repaint()

        rows.append({"tokens": T, "heatmap": timed(redraw, reps), "grid": timed(regrid, max(3, reps // 2)),
                     "zoom_tile": timed(zoom, reps)})
        heat.close()
        grid.close()
        # Deleted here, while the application lives: left to Python's exit, pyqtgraph's shared
        # objects are destroyed after the QApplication and the process dies with SIGSEGV.
        heat.deleteLater()
        grid.deleteLater()
        QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
        app.processEvents()
        session.set_tokens(common.prompt_tokens(1))
    return {"rows": rows}


if __name__ == "__main__":
    folder, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(main(folder, threads, reps, [int(a) for a in sys.argv[4:]])), flush=True)
