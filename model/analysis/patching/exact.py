"""Exact activation patching: one patched run per cell of a grid, every kind of `WHATS` but
path patching (path_patching.py), in both directions.

Each cell is a run of the target prompt (the corrupted one when denoising, the clean one when
noising) with one activation written from the source prompt's run, under the head mask and the
feature clamps both runs share; its value is the metric at the metric's position. The runs go through
`model/capture/patched_runs.py` in batches sized to the memory budget, reusing the cached target
run below the patched layer and before the patched position.

`layout(...)` says which patches make each cell; `patch_grid` computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.analysis.patching.grid import DIRECTIONS, WHATS, PatchGrid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.capture.interventions import Patch, as_intervention
from transformer_viewer.model.capture.layer_watch import layer_watch
from transformer_viewer.model.capture.memory_budget import patch_batch_size
from transformer_viewer.model.capture.patched_runs import PatchedBatch, patched_final
from transformer_viewer.model.capture.session_patching import check_positions
from transformer_viewer.model.decoder.hooks import reading
from transformer_viewer.model.errors import ModelError, stop_if_cancelled

# Above this many tokens the full exact grid is not computed by default (by-position grids
# take minutes on a CPU there): the window shows attribution patching's estimate and computes
# exact cells on request (`cells=`).
EXACT_GRID_MAX_TOKENS = 256

MIN_BATCH_ROWS = 256  # rows below which a batch of patched runs is not split to skip rows
BY_POSITION = ("embed", "resid", "attn", "mlp", "heads-by-pos")  # kinds that need prompts of one length
EXACT_WHATS = tuple(w for w in WHATS if w != "path")
GROUPED_NOTE = ("{group} query heads share each key/value head: patching key/value head g patches "
                "its whole group of query heads; the columns are key/value heads")


@dataclass(frozen=True)
class Layout:
    """The grid of one kind: its axes and labels, and the patches that make each cell."""

    row_axis: str
    col_axis: str
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    cell_patches: dict  # (r, c) -> tuple of Patch
    note: str = ""


def source_of(direction: str) -> str:
    """The run a patch's value comes from: the clean one when denoising, the corrupted one when noising."""
    if direction not in DIRECTIONS:
        raise ModelError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    return "clean" if direction == "denoise" else "corrupted"


def layout(config, what: str, source: str, T: int, position_labels, layer: int | None = None) -> Layout:
    """Which patches make each cell of a `what` grid over a prompt of T tokens (positions
    labelled by `position_labels`), patching from the `source` run."""
    L, nh, nkv = config.n_layer, config.n_head, config.kv_heads
    positions = tuple(position_labels)
    layers = tuple(str(la) for la in range(L))
    if what == "embed":
        return Layout("site", "position", ("embed",), positions,
                      {(0, p): (Patch(source, "embed", 0, None, (p,)),) for p in range(T)})
    if what == "resid":
        return Layout("layer", "position", (*(f"{la} resid_pre" for la in range(L)), "final resid_post"), positions,
                      {(la, p): (Patch(source, "resid_pre", la, None, (p,)),) for la in range(L + 1) for p in range(T)})
    if what in ("attn", "mlp"):
        site = "attn_out" if what == "attn" else "mlp_out"
        return Layout("layer", "position", layers, positions,
                      {(la, p): (Patch(source, site, la, None, (p,)),) for la in range(L) for p in range(T)})
    if what == "heads-by-pos":
        if layer is None or not 0 <= layer < L:
            raise ModelError(f"heads-by-pos patches one layer's heads: give a layer in 0..{L - 1}")
        return Layout("head", "position", tuple(f"{layer}.{h}" for h in range(nh)), positions,
                      {(h, p): (Patch(source, "z", layer, h, (p,)),) for h in range(nh) for p in range(T)})
    if what in ("heads", "pattern", "q"):
        site = {"heads": "z", "pattern": "pattern", "q": "q"}[what]
        return Layout("layer", "head", layers, tuple(str(h) for h in range(nh)),
                      {(la, h): (Patch(source, site, la, h, None),) for la in range(L) for h in range(nh)})
    if what in ("k", "v"):
        note = GROUPED_NOTE.format(group=nh // nkv) if nkv < nh else ""
        return Layout("layer", "key/value head", layers, tuple(str(g) for g in range(nkv)),
                      {(la, g): (Patch(source, what, la, g, None),) for la in range(L) for g in range(nkv)}, note)
    if what == "path":
        raise ModelError("path patching needs a receiver head and input: see path_patching.path_patch_grid")
    raise ModelError(f"what to patch must be one of {', '.join(WHATS)}, got {what!r}")


def metric_values(session, sources, metric: PatchMetric) -> tuple[float, float, torch.Tensor]:
    """The metric of the clean and the corrupted run, and the clean run's log-probabilities at its
    metric position (V,), which the kl metric compares every run with."""
    values = {}
    clean_lp = None
    for name in ("clean", "corrupted"):
        run = sources.runs[name]
        m = metric.resolve_position(run.T)
        logits = session.model.unembed(run.resid[-1][:, m]).float()[:, : session.n_vocab]  # (1, V)
        if name == "clean":
            clean_lp = torch.log_softmax(logits[0], dim=-1)
        values[name] = float(metric(logits, clean_lp)[0])
    return values["clean"], values["corrupted"], clean_lp


@torch.inference_mode()
def metric_top_tokens(session, position: int | None = None, intervention=None) -> tuple[int, int]:
    """The clean and the corrupted run's top predicted token at the metric's `position` (None:
    the last; negative: from the end), under `intervention`'s head mask and clamps: a logit-diff metric's
    default tokens."""
    change = as_intervention(session.config, intervention).with_patches(())
    sources = session.patch_sources(change, sites=())
    tops = []
    for name in ("clean", "corrupted"):
        run = sources.runs[name]
        m = PatchMetric("kl", (), position).resolve_position(run.T)
        logits = session.model.unembed(run.resid[-1][0, m]).float()[: session.n_vocab]  # (V,)
        tops.append(int(logits.argmax()))
    return tops[0], tops[1]


@dataclass(frozen=True)
class _Pair:
    """The two runs of one patching experiment, as `patch_grid` and `patched_metrics` read them."""

    batch: PatchedBatch
    clean: float
    corrupted: float
    clean_logprobs: torch.Tensor  # (V,)
    target_value: float  # the unpatched target run's metric


def _prepare(session, metric: PatchMetric, source: str, change, sites) -> _Pair:
    target = "corrupted" if source == "clean" else "clean"
    sources = session.patch_sources(change, sites=sites)
    tgt, src = sources.runs[target], sources.runs[source]
    skip = session.skip_rows(change)
    align = session.patch_alignment(tgt, src, metric.position, skip)
    clean, corrupted, clean_lp = metric_values(session, sources, metric)
    batch = PatchedBatch(change.mask, change.ablation, tgt, src, align, skip, session.patch_clamp_hooks(change))
    return _Pair(batch, clean, corrupted, clean_lp, corrupted if target == "corrupted" else clean)


def _run_batches(session, pair: _Pair, metric: PatchMetric, runs: list, progress, is_cancelled) -> np.ndarray:
    """The metric of each run (a tuple of patches each), in batches sized to the memory budget."""
    values = np.full(len(runs), np.nan, dtype=np.float32)
    align = pair.batch.align
    size = patch_batch_size(session.config, align.T, session.memory_budget)
    batches = batched(range(len(runs)), runs, size, align.metric_row + 1,
                      align.same_before if pair.batch.skip_rows else 0)
    done = 0
    # Cancelling stops a batch too, at its next layer: a batch of long prompts takes seconds.
    watch = layer_watch(0, session.config.n_layer, None, is_cancelled)
    with session._scratch_attention(), reading(session.model, watch):
        for batch in batches:
            stop_if_cancelled(is_cancelled)
            final = patched_final(session.model, pair.batch, [runs[i] for i in batch])  # (B, C)
            logits = session.model.unembed(final).float()[:, : session.n_vocab]  # (B, V)
            values[batch] = metric(logits, pair.clean_logprobs).cpu().numpy()
            done += len(batch)
            if progress is not None:
                progress(done, len(runs))
    return values


@torch.inference_mode()
def patched_metrics(session, interventions, metric: PatchMetric, progress=None, is_cancelled=None) -> np.ndarray:
    """The metric of each run an Intervention with patches describes (all patches of all from
    one source run, all under one head mask and clamps), batched as a grid's cells are; (N,) float32."""
    interventions = [as_intervention(session.config, i) for i in interventions]
    if not interventions:
        return np.zeros(0, dtype=np.float32)
    masks = {i.with_patches(()) for i in interventions}
    sources = {p.source for i in interventions for p in i.patches}
    if len(masks) != 1 or len(sources) != 1:
        raise ModelError("patched runs measured together need one head mask and patches from one source run")
    runs = [i.patches for i in interventions]
    pair = _prepare(session, metric, sources.pop(), masks.pop(), {p.site for r in runs for p in r})
    for run in runs:
        check_positions(run, pair.batch.target.T, pair.batch.source.T)
    return _run_batches(session, pair, metric, runs, progress, is_cancelled)


@torch.inference_mode()
def patch_grid(session, what: str, metric: PatchMetric, direction: str = "denoise", intervention=None,
               layer: int | None = None, progress=None, is_cancelled=None, cells=None) -> PatchGrid:
    """Patch every cell of a `what` grid (one of WHATS but "path") between the session's clean
    and corrupted prompts, in `direction`, under `intervention`'s head mask and feature clamps
    (both runs alike; a patch at a clamp's hook point writes the source's clamped value).

    `cells`: (row, col) pairs to compute, the others NaN (exact cells on demand); None: all.
    `progress(done, total)` hears of each batch of patched runs; once `is_cancelled()` is true
    the grid raises `Cancelled` at the next layer a batch starts, or before the next batch. Prompts of different lengths are lined up
    at the metric's position: heads, pattern, q, k and v patch every position the two share;
    kinds by position raise ModelError."""
    source = source_of(direction)
    change = as_intervention(session.config, intervention).with_patches(())
    if what in BY_POSITION:
        pair = session.prompt_pair()
        if not pair.same_length:
            raise ModelError(f"the prompts differ in length ({pair.clean_tokens} and {pair.corrupted_tokens} tokens); "
                             f"patching {what} by position needs equal lengths: make them tokenize alike, or patch "
                             "heads, pattern, q, k or v, which need no positions")
    if what not in EXACT_WHATS:
        layout(session.config, what, source, 0, ())  # raises, saying what can be patched
    target = session.tokens if source == "corrupted" else session.corrupted
    T = len(target.ids)
    grid = layout(session.config, what, source, T, (f"{p} {target.labels[p]}" for p in range(T)), layer)
    pair = _prepare(session, metric, source, change, {p.site for run in grid.cell_patches.values() for p in run})

    raw = np.full((len(grid.rows), len(grid.cols)), np.nan, dtype=np.float32)
    wanted = list(grid.cell_patches) if cells is None else [tuple(int(i) for i in c) for c in cells]
    for cell in wanted:
        if cell not in grid.cell_patches:
            raise ModelError(f"cell {cell} is outside the {len(grid.rows)} x {len(grid.cols)} grid")
    todo = []
    metric_row = pair.batch.align.metric_row
    for cell in dict.fromkeys(wanted):
        patches = grid.cell_patches[cell]
        align = pair.batch.align
        if pair.batch.skip_rows and all(p.positions is not None and (p.positions[0] > metric_row or
                                                                     p.positions[-1] < align.same_before)
                                        for p in patches):
            # After the metric's position (causally unseen), or before the prompts differ (the
            # same values in both runs): the patch changes nothing.
            raw[cell] = pair.target_value
        else:
            todo.append(cell)
    values = _run_batches(session, pair, metric, [grid.cell_patches[c] for c in todo], progress, is_cancelled)
    for cell, value in zip(todo, values, strict=True):
        raw[cell] = value
    return PatchGrid(what=what, direction=direction, metric=metric.describe(session.tokenizer.label), raw=raw,
                     clean=pair.clean, corrupted=pair.corrupted, row_axis=grid.row_axis, col_axis=grid.col_axis,
                     rows=grid.rows, cols=grid.cols, note=grid.note)


def batched(indices, runs, size: int, T: int, same_before: int = 0) -> list[list[int]]:
    """Indices of `runs` (a tuple of patches each) in batches of at most `size` that start
    alike: by the first layer their patches touch, then from the latest position down. A batch
    computes every run from its earliest row, so it takes runs of a later first row only while
    that wastes at most a quarter of its rows, or while it is too small to be worth splitting
    (MIN_BATCH_ROWS); T is how many positions a run computes, `same_before` the rows none does."""
    def start(i):
        layer = min(-1 if p.site == "embed" else p.layer for p in runs[i])
        first = min(0 if p.positions is None else p.positions[0] for p in runs[i])
        return layer, -min(max(first, same_before), T - 1)

    by_layer: dict[int, list] = {}
    for i in sorted(indices, key=start):
        by_layer.setdefault(start(i)[0], []).append(i)
    batches = []
    for group in by_layer.values():
        batch, needed = [], 0  # rows the batch's runs need on their own
        for i in group:
            rows = T + start(i)[1]  # this run's rows, from its first; the batch's earliest so far
            padded = (len(batch) + 1) * rows
            if batch and (len(batch) == size or (padded > MIN_BATCH_ROWS and padded > 1.25 * (needed + rows))):
                batches.append(batch)
                batch, needed = [], 0
            batch.append(i)
            needed += rows
        if batch:
            batches.append(batch)
    return batches
