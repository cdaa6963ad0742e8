"""Runs with activation patches: a batch of runs of one prompt (the target), each with its own
patches (`Patch`, model/capture/interventions.py) whose values are read from the other prompt's
run (the source), computed from the cached target run with as little work as possible.

What makes it cheap, each exact (a run computes the same activations as a full forward with the
patch written by a hook, within float32 rounding):
- layers before the first patched one are not run: the batch starts from the target's cached
  resid_pre of that layer;
- a patch at position p changes nothing before p in any layer (attention is causal), and
  nothing before the first position where the two prompts differ (both runs are the same
  there), so each layer computes only rows from the later of the two (`Block.forward(x,
  first_row)`), reading the keys and values of the earlier rows from the target's cached
  residual stream;
- the metric reads one position m: positions after m are never computed, and the last layer
  computes row m alone.
Mean ablation averages a masked head over every position, so under a mean-ablated head mask
every layer run computes every row.

Every patch is applied by a forward hook on its hook point, written so that a hook seeing the
last t rows of a sequence of T' (a layer run from row T' - t) patches the right positions.

Feature clamps (model/capture/feature_clamps.py) apply to both prompts' runs alike, as the head
mask does: the runs a patch reads from are the clamped runs, and a patched run installs the clamp
hooks of the layers it computes (placed by counting positions from the end, as the patches are)
before its patch hooks, so a patch at a clamp's hook point writes the source's clamped value. Each
clamp changes a token's activation from that token's alone, so skipping rows stays exact: rows
before the first one computed are the clamped target run's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from transformer_viewer.model.capture.interventions import PATCH_SITES, Patch, batched_head_mask_hooks
from transformer_viewer.model.decoder.hooks import caching, hooks

# The sites a run keeps for patches when no caller says which (the residual stream is always
# kept: patched runs start from it); patterns, L x nh x T^2 floats a run, only when asked for.
SOURCE_SITES = ("embed", "attn_out", "mlp_out", "z", "q", "k", "v")


@dataclass
class RunActivations:
    """One prompt's run under a head mask, its patchable activations kept, each (1, T, ...):
    the source of patches into the other prompt's run, and the start of patched runs of its own."""

    ids: torch.Tensor  # (1, T)
    resid: list  # resid_pre of each layer, then the final resid_post, (1, T, C) each
    acts: dict  # hook name -> (1, T, ...) activation, as the run's hooks left it
    sites: set = field(default_factory=set)  # the sites (PATCH_SITES) whose activations `acts` holds

    @property
    def T(self) -> int:
        return self.ids.shape[1]


def site_hook_names(model, sites) -> list[str]:
    """The hook points whose activations a patch of each of `sites` reads (the residual stream's
    are always kept)."""
    L = model.config.n_layer
    names = []
    for site in sites:
        if site == "embed":
            names += ["hook_embed"] + (["hook_pos_embed"] if model.wpe is not None else [])
        elif site != "resid_pre":
            names += [PATCH_SITES[site][0].format(layer=layer) for layer in range(L)]
    return names


def record_run(model, ids: torch.Tensor, mask, ablation: str, sites=SOURCE_SITES, clamps=()) -> RunActivations:
    """Run `ids` (1, T) under the head mask `mask` (L, nh) and the feature clamps' hooks `clamps`
    ((name, hook) pairs for a run from layer 0), keeping the residual stream and the activations
    of `sites` as the run's hooks left them (clamped where a clamp's hook point is a site's)."""
    L = model.config.n_layer
    resid_names = [f"blocks.{layer}.hook_resid_pre" for layer in range(L)]
    with (hooks(model, batched_head_mask_hooks(mask[None], ablation) + list(clamps)),
          caching(model, resid_names + site_hook_names(model, sites)) as kept):
        final = model.run_blocks(model.embed(ids))
    resid = [kept.pop(n) for n in resid_names] + [final]
    return RunActivations(ids, resid, kept, set(sites))


def record_sites(model, run: RunActivations, mask, ablation: str, sites, clamps=()) -> None:
    """Add the activations of `sites` to a kept run: one more forward of its prompt, under the
    same head mask and clamp hooks `clamps` as `record_run`'s."""
    missing = [site for site in sites if site not in run.sites]
    names = site_hook_names(model, missing)
    if names:
        with hooks(model, batched_head_mask_hooks(mask[None], ablation) + list(clamps)), caching(model, names) as kept:
            model.run_blocks(model.embed(run.ids))
        run.acts.update(kept)
    run.sites.update(missing)


@dataclass(frozen=True)
class Alignment:
    """How the target's positions meet the source's: source position = target position + shift.
    The runs are lined up at the metric's position `row` (equal lengths: shift 0); `T` is how
    many target positions are run (up to and including the metric's where later ones cannot
    matter: then row = T - 1)."""

    T: int
    shift: int = 0
    row: int = -1  # the metric's position in the target; -1: the last run (T - 1)
    # Leading positions where the two prompts hold the same tokens (equal lengths only): every
    # activation there is the same in both runs (attention is causal), so a patch cannot change them.
    same_before: int = 0

    @property
    def metric_row(self) -> int:
        return self.T - 1 if self.row < 0 else self.row


def source_rows(src: torch.Tensor, align: Alignment, dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The source activation (1, Ts, ...) at the target's positions 0..T-1 along `dim`, and a
    (T,) bool of the target positions that have a source position (zeros where none)."""
    T, s = align.T, align.shift
    idx = torch.arange(T, device=src.device) + s  # (T,) source position of each target position
    have = (idx >= 0) & (idx < src.shape[dim])
    rows = src.index_select(dim, idx.clamp(0, src.shape[dim] - 1))
    shape = [1] * rows.dim()
    shape[dim] = T
    return rows * have.view(shape).to(rows.dtype), have


def aligned_pattern(src: torch.Tensor, align: Alignment) -> tuple[torch.Tensor, torch.Tensor]:
    """The source pattern (1, nh, Ts, Ts) at the target's query rows and key columns 0..T-1 and
    the (T,) target rows that have a source row. Where the source is longer, weight on its keys
    before the target's first position is dropped and each row renormalised to sum to one."""
    rows, have = source_rows(src, align, dim=2)  # (1, nh, T, Ts)
    cols, _ = source_rows(rows, align, dim=3)  # (1, nh, T, T)
    if align.shift > 0:
        total = cols.sum(dim=-1, keepdim=True)
        cols = torch.where(total > 0, cols / total.clamp_min(torch.finfo(cols.dtype).tiny), cols)
    return cols, have


def _patch_hook(B: int, entries, src: torch.Tensor, align: Alignment, heads_dim: int | None, pattern: bool):
    """One forward hook writing, in batch element b, the source activation at each of its
    (b, head or None, positions or None) entries; other elements and places pass unchanged."""
    T = align.T
    if pattern:
        values, have = aligned_pattern(src, align)  # (1, nh, T, T), (T,)
        nh = src.shape[1]
        where = torch.zeros(B, nh, T, 1, dtype=torch.bool, device=src.device)
    else:
        values, have = source_rows(src, align)  # (1, T, ...)
        n_heads = 1 if heads_dim is None else src.shape[2]
        where = torch.zeros(B, T, n_heads, dtype=torch.bool, device=src.device)
    for b, head, positions in entries:
        rows = slice(None) if positions is None else [p for p in positions if p < T]
        heads = slice(None) if head is None else head
        if pattern:
            where[b, heads, rows] = True
        else:
            where[b, rows, heads] = True
    if pattern:
        where &= have.view(1, 1, T, 1)
    else:
        where &= have.view(1, T, 1)
        where = where.view(*where.shape, *([1] if heads_dim is not None else []))  # (B, T, nh, 1) or (B, T, 1)

    def hook(_point, _inputs, act: torch.Tensor) -> torch.Tensor:
        if pattern:  # (B, nh, T, T), always whole
            return torch.where(where, values.to(act.dtype), act)
        t = act.shape[1]  # the layer ran rows T - t..T - 1
        return torch.where(where[:, T - t:], values[:, T - t:].to(act.dtype), act)

    return hook


# The hooks of feature clamps for a run from layer `start_layer` whose hooks see the last rows
# of `total` positions: (start_layer, total) -> [(hook name, hook)].
ClampHooks = Callable[[int, int], list]


def no_clamps(_start_layer: int, _total: int) -> list:
    return []


@dataclass(frozen=True)
class PatchedBatch:
    """What a batch of patched runs needs beside the patches: the head mask both runs share,
    the target and source runs, how their positions meet, whether rows before a patch may be
    skipped (not under a mean-ablated mask), and the hooks of the feature clamps both runs
    share (the ones the target and source runs were recorded under)."""

    mask: object  # (L, nh) bool
    ablation: str
    target: RunActivations
    source: RunActivations
    align: Alignment
    skip_rows: bool = True
    clamp_hooks: ClampHooks = no_clamps


def patched_final(model, batch: PatchedBatch, runs: list[tuple[Patch, ...]]) -> torch.Tensor:
    """The final residual stream at the metric's position (`batch.align.metric_row`), (B, C), of
    each run in `runs` (a tuple of patches each, all from `batch.source`). Runs from the earliest
    layer any patch touches, rows from the earliest patched position."""
    L = model.config.n_layer
    T, m = batch.align.T, batch.align.metric_row
    B = len(runs)
    patches = [p for run in runs for p in run]
    start = min((p.layer for p in patches if p.site != "embed"), default=L)
    embed = any(p.site == "embed" for p in patches)
    first = 0
    if batch.skip_rows and patches:
        first = min(min(p.positions) if p.positions is not None else 0 for p in patches)
        # Patches before the prompts differ, or after the metric's position, change nothing.
        first = min(max(first, batch.align.same_before), m)
    # A layer whose pattern is patched computes every row: its hook sees only a whole pattern.
    pattern_layers = {p.layer for p in patches if p.site == "pattern"}
    # The last layer needs the metric's row alone, unless a mean-ablated head needs every row.
    last_first = first if not batch.skip_rows else m

    by_hook: dict[str, list] = {}
    for b, run in enumerate(runs):
        for p in run:
            by_hook.setdefault(p.hook_name(L), []).append((b, p))
    named = []
    for name, items in by_hook.items():
        p0 = items[0][1]
        entries = [(b, p.head, p.positions) for b, p in items]
        if p0.site == "embed":
            for embed_name in ("hook_embed", "hook_pos_embed") if model.wpe is not None else ("hook_embed",):
                src = batch.source.acts[embed_name]
                named.append((embed_name, _patch_hook(B, entries, src, batch.align, None, False)))
            continue
        if p0.site == "resid_pre":
            src = batch.source.resid[p0.layer]
        else:
            src = batch.source.acts[name]
        heads_dim = 2 if PATCH_SITES[p0.site][1] is not None else None
        named.append((name, _patch_hook(B, entries, src, batch.align, heads_dim, p0.site == "pattern")))

    tgt = batch.target
    if not patches:
        return tgt.resid[L][:, m].expand(B, -1)  # (B, C)
    if start == L and not embed:  # only the final residual stream is patched: the clamps are in it
        x = tgt.resid[L][:, :T].expand(B, T, -1)
        hook = [h for n, h in named if n == f"blocks.{L - 1}.hook_resid_post"][0]
        return hook(None, (), x)[:, m]
    if embed:
        start = 0
    # Clamps of layers before `start` are in the cached resid_pre it starts from; the others go
    # before the patches, so that a patch at a clamp's hook point writes over the clamped value.
    clamped = batch.clamp_hooks(start, T)
    with hooks(model, batched_head_mask_hooks(batch.mask[None], batch.ablation) + clamped + named):
        if embed:
            x = model.embed(tgt.ids[:, :T].expand(B, T))  # (B, T, C)
        else:
            x = tgt.resid[start][:, :T].expand(B, T, -1)  # (B, T, C)
        for layer in range(start, L):
            row = 0 if layer in pattern_layers else last_first if layer == L - 1 else first
            out = model.blocks[layer](x, row)  # (B, T - row, C)
            if layer == L - 1:
                return out[:, m - row]
            if row:  # rows before `row` are the target's own in every later layer
                out = torch.cat([tgt.resid[layer + 1][:, :row].expand(B, row, -1), out], dim=1)  # (B, T, C)
            x = out
    raise AssertionError("unreachable")
