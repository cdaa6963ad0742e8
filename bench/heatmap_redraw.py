"""Median redraw time of HeatmapView and HeadGridView: set new data, then paint synchronously.

    .venv/bin/python bench/heatmap_redraw.py [64 256 1024]

Goal: <= 30 ms median for a 1024 x 1024 heatmap. Runs offscreen, one thread.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
from PySide6 import QtWidgets  # noqa: E402


def median_ms(fn, n: int, warmup: int = 3) -> float:
    for i in range(warmup):  # font and pixmap caches fill on the first frames
        fn(i)
    wall, cpu = [], []
    for i in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(i)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def fmt(t) -> str:
    # CPU time is what the redraw costs; wall time also counts waiting for a busy machine.
    return f"{t[0]:6.1f} ms wall / {t[1]:5.1f} ms cpu"


def main(sizes: list[int]) -> None:
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    from transformer_viewer.viewer.views.head_grid import HeadGridView
    from transformer_viewer.viewer.views.heatmap import HeatmapView

    rng = np.random.default_rng(0)
    for T in sizes:
        w = HeatmapView()
        w.resize(900, 820)
        w.show()
        labels = tuple(f"tok{i}" for i in range(T))
        frames = [np.tril(rng.random((T, T))).astype(np.float16) for _ in range(4)]
        w.set_data(frames[0], labels, labels)
        app.processEvents()

        def redraw(i, w=w, frames=frames, labels=labels, log=False):
            w.set_data(frames[i % 4], labels, labels, log_scale=log, title=f"layer 0 head {i % 4}")
            w.graphics.viewport().repaint()

        lin = median_ms(redraw, 20)
        log = median_ms(lambda i: redraw(i, log=True), 20)
        print(f"heatmap {T:5d} x {T:<5d} linear {fmt(lin)}   log {fmt(log)}  (median of 20)")
        w.close()

        g = HeadGridView()
        g.resize(520, 520)
        g.show()
        att = np.tril(rng.random((12, 12, T, T), dtype=np.float32)).astype(np.float16) if T <= 512 else \
            np.tril(np.ones((12, 12, T, T), dtype=np.float16))
        g.set_patterns(att)
        app.processEvents()

        def grid(i, g=g, att=att):
            g.set_patterns(att)
            g.graphics.viewport().repaint()

        print(f"grid 12 x 12 heads at {T:5d} tokens {fmt(median_ms(grid, 5))}  (median of 5)")
        g.close()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [64, 256, 1024])
