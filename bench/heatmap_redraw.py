"""Median redraw time of HeatmapView and HeadGridView: set new data, then paint synchronously.

    .venv/bin/python bench/heatmap_redraw.py [64 256 1024]

Goal: <= 30 ms median for a 1024 x 1024 heatmap. Runs offscreen, one thread. Then the long
prompt views, drawn from pooled overviews as the window draws them: the attention heatmap
after a zoom (a 256 x 256 overview of 8,192 tokens with a 512 x 512 full-resolution tile drawn
over it; goal <= 30 ms) and the heads grid of 30 x 9, 28 x 16 and 32 x 32 heads from their
overviews (goal <= 50 ms for 30 x 9).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import common  # noqa: E402
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


def long_prompt_views(T: int = 8192) -> None:
    """Zoom redraw of the attention heatmap, and grid redraws, from overviews of a T-token prompt."""
    app = QtWidgets.QApplication.instance()
    from transformer_viewer.viewer.views.head_grid import HeadGridView
    from transformer_viewer.viewer.views.zoom_heatmap import ZoomHeatmap

    rng = np.random.default_rng(1)
    cell = -(-T // 256)
    n = -(-T // cell)
    labels = tuple(f"tok{i % 997}" for i in range(T))
    w = ZoomHeatmap(debounce_ms=10_000)  # no tile loader here: the tile is set by hand
    w.resize(900, 820)
    w.show()
    w.set_data(np.tril(rng.random((n, n))).astype(np.float32), labels, labels, cell=cell)
    app.processEvents()
    tiles = [np.tril(rng.random((512, 512))).astype(np.float32) for _ in range(4)]

    def zoom(i, w=w):
        r0 = 512 * (i % 8)  # a new place each time: the view moves and its tile is drawn over the overview
        w.set_visible_tokens((r0, r0 + 512), (r0, r0 + 512))
        w.set_tile(tiles[i % 4], (r0, r0 + 512), (r0, r0 + 512))
        w.graphics.viewport().repaint()

    print(f"heatmap zoom at {T} tokens (256 x 256 overview + 512 x 512 tile) {fmt(median_ms(zoom, 20))}  (median of 20)")
    w.close()
    for L, nh in ((30, 9), (28, 16), (32, 32)):
        g = HeadGridView()
        g.resize(520, 520)
        g.show()
        frames = [(rng.random((L, nh, n, n), dtype=np.float32).astype(np.float16),) * 2 for _ in range(2)]
        g.set_overviews(*frames[0], cell, T)
        app.processEvents()

        def regrid(i, g=g, frames=frames, cell=cell):
            g.set_overviews(*frames[i % 2], cell, T)
            g.graphics.viewport().repaint()

        print(f"grid {L} x {nh} heads from {n} x {n} overviews ({T} tokens) {fmt(median_ms(regrid, 5))}  (median of 5)")
        g.close()


if __name__ == "__main__":
    print("CPU:", common.machine()["cpu"])
    main([int(a) for a in sys.argv[1:]] or [64, 256, 1024])
    long_prompt_views()
