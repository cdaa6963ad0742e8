"""Full-resolution attention on demand as worker requests: a rectangular tile of one head's
pattern (what a zoomed heatmap shows), and one head's whole pattern streamed to a `.npy` file.

A trace keeps only pooled overviews; these recompute the rest from the session's cache for
the trace's run (model/capture/on_demand.py). Tile requests of one kind supersede each other, so a
pan or zoom that moves on drops the tile it no longer needs. The handlers import the model
code on the worker thread only; importing this module keeps torch off
the GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.viewer.worker.requests import Cancelled, Request


@dataclass(frozen=True)
class PatternTileRequest(Request):
    """Query rows rows[0]..rows[1]-1 against keys cols[0]..cols[1]-1 of head (layer, head) in
    the run that made the trace numbered `run_id`."""

    kind: ClassVar[str] = "pattern-tile"
    run_id: int = 0
    layer: int = 0
    head: int = 0
    rows: tuple[int, int] = (0, 0)
    cols: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class PatternRowRequest(PatternTileRequest):
    """A tile too (usually one query row), of its own kind: the token strip's row and the
    heatmap's zoom do not supersede each other."""

    kind: ClassVar[str] = "pattern-row"


@dataclass(frozen=True)
class PatternDiffRequest(PatternTileRequest):
    """The tile of run `run_id` minus the same tile of run `base_run_id` (masked minus clean)."""

    kind: ClassVar[str] = "pattern-diff"
    base_run_id: int = 0


@dataclass(frozen=True)
class PatternTileResult:
    tile: Any  # (rows, cols) float32 ndarray
    run_id: int
    layer: int
    head: int
    rows: tuple[int, int]
    cols: tuple[int, int]
    base_run_id: int | None = None  # a difference against this run's tile

    @property
    def source(self) -> tuple:
        """What the tile was cut from: a view draws it only if that is still what it shows."""
        if self.base_run_id is None:
            return ("tile", self.run_id, self.layer, self.head)
        return ("diff", self.run_id, self.base_run_id, self.layer, self.head)


def tile_source(run_id: int, layer: int, head: int) -> tuple:
    return ("tile", run_id, layer, head)


def diff_source(run_id: int, base_run_id: int, layer: int, head: int) -> tuple:
    return ("diff", run_id, base_run_id, layer, head)


@dataclass(frozen=True)
class PatternExportRequest(Request):
    """One head's whole (T, T) float32 pattern written to `path` as .npy, block by block."""

    kind: ClassVar[str] = "pattern-export"
    run_id: int = 0
    layer: int = 0
    head: int = 0
    path: str = ""


def _trace_of(session, run_id: int):
    from transformer_viewer.model.errors import ModelError

    for trace in (session.clean, session.masked[1] if session.masked else None):
        if trace is not None and trace.run_id == run_id:
            return trace
    raise ModelError("that trace is no longer the worker's; run the prompt again")


def handle_tile(session, request: PatternTileRequest, _progress, _is_cancelled) -> PatternTileResult:
    from transformer_viewer.model.capture.on_demand import pattern_tile

    trace = _trace_of(session, request.run_id)
    tile = pattern_tile(session, trace, request.layer, request.head, tuple(request.rows), tuple(request.cols))
    return PatternTileResult(tile, request.run_id, request.layer, request.head, tuple(request.rows),
                             tuple(request.cols))


def handle_diff(session, request: PatternDiffRequest, _progress, _is_cancelled) -> PatternTileResult:
    from transformer_viewer.model.capture.on_demand import pattern_tile

    rows, cols = tuple(request.rows), tuple(request.cols)
    tile = pattern_tile(session, _trace_of(session, request.run_id), request.layer, request.head, rows, cols)
    base = pattern_tile(session, _trace_of(session, request.base_run_id), request.layer, request.head, rows, cols)
    return PatternTileResult(tile - base, request.run_id, request.layer, request.head, rows, cols,
                             base_run_id=request.base_run_id)


def handle_export(session, request: PatternExportRequest, progress, is_cancelled) -> str:
    from transformer_viewer.model.capture.on_demand import save_head_pattern
    from transformer_viewer.model.errors import ModelError

    trace = _trace_of(session, request.run_id)
    try:
        done = save_head_pattern(session, trace, request.layer, request.head, request.path,
                                 progress=lambda rows, total: progress(rows, total, "writing the pattern…"),
                                 is_cancelled=is_cancelled)
    except OSError as e:
        raise ModelError(f"cannot write {request.path}: {e.strerror or e}; choose another folder") from None
    if not done:
        raise Cancelled
    return request.path
