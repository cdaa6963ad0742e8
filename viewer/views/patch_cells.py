"""What the patching view reads off a PatchGrid (model/analysis/patching/grid.py): the values it
draws, the cell a click names in the other views' terms, one cell's readout, and the figure's
title. Pure functions of numpy arrays and the setup, so the command line's figures and the
window's view say the same."""

from __future__ import annotations

import math

import numpy as np

NORMALISED_NOTE = "normalised: corrupted = 0, clean = 1"


def shown_values(grid, normalised: bool) -> np.ndarray:
    """(R, C) what the heatmap draws: the normalised values or the raw metric."""
    return grid.normalised if normalised else grid.raw


def merged(base, cells: dict[tuple[int, int], float]):
    """`base` with the exact values of single cells written over it (NaN elsewhere when `base` is
    an estimate): the exact grid a long prompt fills cell by cell."""
    import dataclasses

    raw = np.full_like(base.raw, np.nan) if base.estimate else base.raw.copy()
    for (r, c), v in cells.items():
        if 0 <= r < raw.shape[0] and 0 <= c < raw.shape[1]:
            raw[r, c] = v
    return dataclasses.replace(base, raw=raw, estimate=False)


def layer_rows(grid, layer: int, n_head: int):
    """One layer's heads of a heads-by-pos grid that holds every layer's (rows layer-major, as
    attribution patching gives them): head x position, like the exact grid of that layer."""
    import dataclasses

    if grid.raw.shape[0] == n_head:
        return grid
    rows = slice(layer * n_head, (layer + 1) * n_head)
    return dataclasses.replace(grid, raw=grid.raw[rows], rows=grid.rows[rows], row_axis="head")


def selection_of(grid, row: int, col: int, layer: int, n_head: int) -> dict:
    """The layer, head and query position a click on cell (row, col) selects in the other views
    (`layer`: the one heads-by-pos shows). A key/value head selects the first query head of its
    group; a row past the last layer (the final residual stream) the last layer."""
    chosen: dict = {}
    n_cols = len(grid.cols)
    for axis, index in ((grid.row_axis, row), (grid.col_axis, col)):
        if axis == "layer":
            chosen["layer"] = index
        elif axis == "head":
            chosen["head"] = index
        elif axis == "key/value head":
            group = max(1, n_head // max(1, n_cols))
            chosen["head"] = index * group
        elif axis == "position":
            chosen["query"] = index
    if grid.what == "heads-by-pos":
        chosen.setdefault("layer", layer)
    return chosen


def value_text(v: float) -> str:
    return "not computed" if not math.isfinite(v) else f"{v:.4g}"


def cell_readout(grid, row: int, col: int, normalised: bool, estimate=None, exact=None) -> str:
    """One line for cell (row, col): where it is, the value shown, and, when both are known, the
    estimate beside the exact patch."""
    where = f"{grid.row_axis} {grid.rows[row]} \u00d7 {grid.col_axis} {grid.cols[col]}"
    parts = []
    for name, g in (("exact", exact), ("estimate", estimate)):
        if g is None or g.raw.shape != grid.raw.shape:
            continue
        raw = float(g.raw[row, col])
        if not math.isfinite(raw):
            parts.append(f"{name}: computing\u2026" if name == "exact" else f"{name}: \u2014")
            continue
        norm = float(g.normalised[row, col])
        parts.append(f"{name} {value_text(norm)} normalised, {value_text(raw)} raw" if normalised
                     else f"{name} {value_text(raw)} raw ({value_text(norm)} normalised)")
    return f"{where}: " + "; ".join(parts) if parts else where


def metric_line(grid) -> str:
    """The metric of the clean and the corrupted run, and whether normalising means anything."""
    line = f"{grid.metric}: clean {value_text(grid.clean)}, corrupted {value_text(grid.corrupted)}"
    if not grid.normalisable:
        line += (" \u2014 too close for the normalised values to mean anything (compare raw values, or "
                 "choose a metric or prompts that tell the runs apart)")
    return line


def shortened_pair(clean: str, corrupted: str, limit: int = 40) -> tuple[str, str]:
    """Both prompts on one line each, cut to about `limit` characters around where they first
    differ (what tells them apart stays in view), an elided part marked with "…"."""
    a, b = " ".join(clean.split()), " ".join(corrupted.split())
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, first - limit // 3)

    def cut(text: str) -> str:
        part = text[start:start + limit]
        return ("…" if start > 0 else "") + part + ("…" if start + limit < len(text) else "")

    return cut(a), cut(b)


def plot_title(grid, normalised: bool, clamps: int = 0) -> str:
    """The heatmap's own short title: what was patched, how, on which scale, and under how many
    feature clamps (both runs clamped alike)."""
    kind = "estimate (attribution patching)" if grid.estimate else "exact patches"
    scale = "normalised" if normalised else "raw"
    under = f", under {clamps} feature clamp{'s' if clamps != 1 else ''}" if clamps else ""
    return f"{grid.what}, {grid.direction}: {kind}, {scale}{under}"


def grid_title(grid, clean: str, corrupted: str, normalised: bool, pairs_name: str = "") -> str:
    """The view's own title (and its figures'): what was patched, how, the metric, both prompts
    (shortened) and the normalisation."""
    kind = "attribution-patching estimate" if grid.estimate else "activation patching"
    a, b = shortened_pair(clean, corrupted)
    prompts = f"pairs from {pairs_name} (averaged)" if pairs_name else f"clean {a!r} vs corrupted {b!r}"
    scale = NORMALISED_NOTE if normalised else "raw metric"
    return f"{grid.what} {kind}, {grid.direction}; {grid.metric}; {prompts}; {scale}"
