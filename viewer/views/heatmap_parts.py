"""What every heatmap-like view shares: colour maps, value formatting, levels, and the export protocol."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtWidgets

COLORMAPS = ("viridis", "inferno", "magma", "plasma", "cividis")
DIVERGING_COLORMAP = "CET-D1"
LOG_FLOOR = 1e-4


def get_colormap(name: str) -> pg.ColorMap:
    """One of the colour maps pyqtgraph ships, by name. Only the names `listMaps()` gives are
    passed on: `pg.colormap.get` also takes a path and reads whatever file it names (a device
    never ends, a pipe blocks)."""
    cmap = None
    if name in pg.colormap.listMaps():
        try:
            cmap = pg.colormap.get(name)
        except Exception:  # noqa: BLE001 - a damaged pyqtgraph install: the same refusal as a wrong name
            cmap = None
    if cmap is None:
        raise ValueError(f"unknown colormap {name[:60]!r}; try one of {', '.join(COLORMAPS)} or {DIVERGING_COLORMAP} "
                         "(or another name pyqtgraph lists)")
    return cmap


def format_value(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    if v != 0 and abs(v) < 5e-4:
        return f"{v:.2e}"
    return f"{v:.3f}"


def log_display(levels: tuple[float, float]) -> tuple[float, tuple[float, float], list]:
    """For a log-scale display of values within `levels`: the floor values are clipped to, the
    log10 levels, and the colour bar's ticks (one per decade)."""
    floor = max(LOG_FLOOR, levels[0]) if levels[0] > 0 else LOG_FLOOR
    top = levels[1] if levels[1] > floor else 1.0
    shown = (math.log10(floor), math.log10(top))
    ticks = [(float(e), f"{10.0 ** e:g}") for e in range(math.ceil(shown[0]), math.floor(shown[1]) + 1)]
    return floor, shown, ticks


def pick_levels(m: np.ndarray, levels, diverging: bool) -> tuple[float, float]:
    """The given levels, or the data's range (symmetric around zero when diverging)."""
    if levels is not None:
        lo, hi = float(levels[0]), float(levels[1])
    elif m.size == 0 or not np.isfinite(m).any():
        lo, hi = 0.0, 1.0
    elif diverging:
        a = float(np.nanmax(np.abs(m)))
        lo, hi = -a, a
    else:
        lo, hi = float(np.nanmin(m)), float(np.nanmax(m))
    if not hi > lo:
        # A constant matrix: a diverging one (all zero) keeps zero at the neutral middle colour.
        lo, hi = (lo - 1e-6, hi + 1e-6) if diverging else (lo, lo + 1e-6)
    return lo, hi


class HeatmapExport:
    """The export protocol (export_target, matrix, row_labels, col_labels) of a view whose
    picture is its `self.heatmap`; mixed in before the Qt base class."""

    def export_target(self):
        return self.heatmap.export_target()

    def matrix(self) -> np.ndarray:
        return self.heatmap.matrix()

    def row_labels(self):
        return self.heatmap.row_labels()

    def col_labels(self):
        return self.heatmap.col_labels()


def plot_over_bar(view: QtWidgets.QWidget, graphics: QtWidgets.QWidget, hover_label: QtWidgets.QLabel,
                  *controls: QtWidgets.QWidget) -> QtWidgets.QHBoxLayout:
    """Lay out `view` as its plot above a bar of the hover readout (taking the spare width) and
    `controls`; returns the bar, for a view that adds to it."""
    bar = QtWidgets.QHBoxLayout()
    bar.setContentsMargins(4, 0, 4, 0)
    bar.addWidget(hover_label, 1)
    for widget in controls:
        bar.addWidget(widget)
    layout = QtWidgets.QVBoxLayout(view)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(2)
    layout.addWidget(graphics, 1)
    layout.addLayout(bar)
    return bar
