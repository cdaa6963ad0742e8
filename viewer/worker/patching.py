"""Activation patching as worker requests (model/analysis/patching/): a whole grid of one kind
(exact, or attribution patching's first-order estimate), and the exact patch of chosen cells
(a clicked cell beside the estimate; a region of a long prompt's grid). The handlers import the
model code on the worker thread only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from transformer_viewer.model.errors import ModelError, stop_if_cancelled
from transformer_viewer.viewer.worker.requests import Request

ESTIMATED = ("resid", "attn", "mlp", "heads", "heads-by-pos")  # what attribution patching estimates


def estimated(what: str) -> bool:
    """Whether attribution patching gives a first, estimated grid of `what`."""
    return what in ESTIMATED


@dataclass(frozen=True, eq=False)  # holds an Intervention (an ndarray inside): compared by identity
class PatchRequest(Request):
    """A patching grid: `what` (grid.WHATS) of the `text` (clean) / `corrupted` pair, or averaged
    over `pairs` ((clean, corrupted), ...) when given; `estimate` asks for attribution patching."""

    kind: ClassVar[str] = "patching"
    text: str = ""
    corrupted: str = ""
    pairs: tuple[tuple[str, str], ...] = ()
    what: str = "heads"
    metric: Any = None  # PatchMetric (model/analysis/patching/metric.py)
    direction: str = "denoise"
    intervention: Any = None  # Intervention (head mask and feature clamps), in both runs; None: the whole model
    layer: int | None = None  # heads-by-pos: the layer shown
    receiver: tuple[int, int] | None = None  # path: the receiver head (layer, head)
    input: str = "v"  # path: the receiver's input
    estimate: bool = False


@dataclass(frozen=True)
class PatchAnswer:
    """A grid, and the prompt length above which the exact grid is not computed by default (the
    view then asks for the cells the user clicks or selects)."""

    grid: Any  # PatchGrid
    exact_max_tokens: int


@dataclass(frozen=True, eq=False)
class PatchCellsRequest(PatchRequest):
    """The exact patch of `cells` ((row, col), ...) of a grid; the others come back NaN."""

    kind: ClassVar[str] = "patching_cells"
    cells: tuple[tuple[int, int], ...] = ()


def _grid(session, request: PatchRequest, progress, is_cancelled, cells=None):
    from transformer_viewer.model.analysis.patching.exact import patch_grid

    common = dict(direction=request.direction, intervention=request.intervention)
    if request.what == "path":
        from transformer_viewer.model.analysis.patching.path_patching import path_patch_grid

        if request.receiver is None:
            raise ModelError("path patching needs a receiver head: choose its layer and head")
        return path_patch_grid(session, receiver=tuple(request.receiver), input=request.input,
                               metric=request.metric, progress=progress, is_cancelled=is_cancelled, **common)
    if request.estimate and request.what in ESTIMATED and cells is None:
        from transformer_viewer.model.analysis.patching.attribution_patching import estimate_grid

        # One layer's heads by position, as the exact grid beside it has them.
        layer = request.layer if request.what == "heads-by-pos" else None
        return estimate_grid(session, request.what, request.metric, layer=layer, progress=progress,
                             is_cancelled=is_cancelled, **common)
    return patch_grid(session, request.what, request.metric, layer=request.layer, progress=progress,
                      is_cancelled=is_cancelled, cells=cells, **common)


def _run(session, request: PatchRequest, progress, is_cancelled, cells=None):
    from transformer_viewer.viewer.worker.handlers import progress_after_delay

    report = progress_after_delay(progress, "patching: {step} of {total} patched runs\u2026")

    def step(done: int, total: int, *_text) -> None:
        stop_if_cancelled(is_cancelled)
        report(done, total)

    pairs = request.pairs or ((request.text, request.corrupted),)
    grids = []
    for clean, corrupted in pairs:
        stop_if_cancelled(is_cancelled)
        session.prepare_analysis(clean)
        if session.corrupted is None or session.corrupted.text != corrupted:  # else its cached runs stay
            session.set_corrupted(corrupted)
        grids.append(_grid(session, request, step, is_cancelled, cells))
    if len(grids) == 1:
        return grids[0]
    from transformer_viewer.model.analysis.patching.pairs import mean_grid

    return mean_grid(grids)


def handle_patch(session, request: PatchRequest, progress, is_cancelled) -> PatchAnswer:
    from transformer_viewer.model.analysis.patching.exact import EXACT_GRID_MAX_TOKENS

    return PatchAnswer(_run(session, request, progress, is_cancelled), EXACT_GRID_MAX_TOKENS)


def handle_patch_cells(session, request: PatchCellsRequest, progress, is_cancelled) -> PatchAnswer:
    from transformer_viewer.model.analysis.patching.exact import EXACT_GRID_MAX_TOKENS

    if not request.cells:
        raise ModelError("no cells to patch: click a cell of the grid or select a region")
    return PatchAnswer(_run(session, request, progress, is_cancelled, cells=tuple(request.cells)),
                       EXACT_GRID_MAX_TOKENS)
