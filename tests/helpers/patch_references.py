"""Activation patching written by hand, for the tests of model/analysis/patching: a plain forward
of our decoder over the whole target prompt with one hook that copies the source run's
activation into place. No layer reuse, no skipped rows, no batching: what the fast paths must equal."""

from __future__ import annotations

import torch

from tests.helpers.tolerances import float32_atol, model_reduction
from transformer_viewer.model.analysis.patching.exact import layout, patch_grid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.capture.interventions import Intervention, Patch, head_mask_hooks
from transformer_viewer.model.decoder.hooks import hooks, run_with_cache

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


def hook_names(model, patch: Patch) -> list[str]:
    L = model.config.n_layer
    if patch.site == "embed":
        return ["hook_embed"] + (["hook_pos_embed"] if model.wpe is not None else [])
    if patch.site == "resid_pre" and patch.layer == L:
        return [f"blocks.{L - 1}.hook_resid_post"]
    name = {"resid_pre": "hook_resid_pre", "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out",
            "z": "attn.hook_z", "q": "attn.hook_q", "k": "attn.hook_k", "v": "attn.hook_v",
            "pattern": "attn.hook_pattern"}[patch.site]
    return [f"blocks.{patch.layer}.{name}"]


def _copy_into(act: torch.Tensor, src: torch.Tensor, patch: Patch, shift: int) -> torch.Tensor:
    """act with the patched places copied from src; target position t reads source t + shift."""
    out = act.clone()
    T = act.shape[2] if patch.site == "pattern" else act.shape[1]
    positions = range(T) if patch.positions is None else patch.positions
    for t in positions:
        s = t + shift
        if not 0 <= s < (src.shape[2] if patch.site == "pattern" else src.shape[1]):
            continue
        if patch.site == "pattern":
            heads = slice(None) if patch.head is None else patch.head
            row = src[0, heads, s, shift:shift + T] if shift >= 0 else None
            if shift > 0:
                row = row / row.sum(dim=-1, keepdim=True)
            if shift < 0:
                row = torch.zeros_like(out[0, heads, t])
                row[..., -shift:t + 1] = src[0, heads, s, : t + shift + 1]
            out[0, heads, t] = row
        elif patch.head is None:
            out[0, t] = src[0, s]
        else:
            out[0, t, patch.head] = src[0, s, patch.head]
    return out


@torch.no_grad()
def reference_logits(model, target_ids, source_ids, patches, mask=None, ablation: str = "zero",
                     position: int = -1, clamps=()) -> torch.Tensor:
    """The logits (V,) at `position` of a plain forward of `target_ids` (1, T) with `patches`
    written by hand from a plain forward of `source_ids` under the same head mask and the same
    hand-written clamp hooks `clamps` (after the mask's, before the patches'), the two lined up
    at `position` (counted from the end)."""
    mask_hooks = (head_mask_hooks(mask, ablation) if mask is not None else []) + list(clamps)
    names = [n for p in patches for n in hook_names(model, p)]
    with hooks(model, mask_hooks):
        _, cache = run_with_cache(model, source_ids, names)
    shift = source_ids.shape[1] - target_ids.shape[1]

    def replace(patch, name):
        def hook(_point, _inputs, act):
            return _copy_into(act, cache[name], patch, shift)
        return hook

    named = [(n, replace(p, n)) for p in patches for n in hook_names(model, p)]
    with hooks(model, mask_hooks + named):
        logits, _ = model(target_ids)
    return logits[0, position]


def metric_of(metric: PatchMetric, logits: torch.Tensor, clean_logits: torch.Tensor, n_vocab: int) -> float:
    """The metric of one run's logits (V,), KL against the clean run's logits (V,)."""
    clean_lp = torch.log_softmax(clean_logits.float()[:n_vocab], dim=-1)
    return float(metric(logits.float()[None, :n_vocab], clean_lp)[0])


def prompt_ids(session, name: str) -> torch.Tensor:
    """The clean or the corrupted prompt's ids, (1, T)."""
    return torch.tensor([(session.tokens if name == "clean" else session.corrupted).ids])


def metric_atol(session, scale: float) -> float:
    """A metric is a difference of logits (or log-probabilities) of magnitude `scale`: twice a
    logit's float32 bound after every layer."""
    return 2 * float32_atol(model_reduction(session.config), session.config.n_layer + 1, scale)


def assert_grid_matches_hand_patches(session, what, metric, direction="denoise", mask=None, ablation="zero",
                                     layer=1, clamps=(), clamp_hooks=()):
    """Every cell of a `what` grid equals the same patch written by hand in a plain forward;
    under feature `clamps` (the session's), `clamp_hooks` are their hooks written by hand."""
    change = Intervention.make(session.config, mask, ablation, clamps=clamps)
    grid = patch_grid(session, what, metric, direction, change, layer=layer)
    source = "clean" if direction == "denoise" else "corrupted"
    target = "corrupted" if source == "clean" else "clean"
    cells = layout(session.config, what, source, len(session.tokens.ids), range(len(session.tokens.ids)), layer)
    position = -1 if metric.position is None else metric.position
    clean_ids, target_ids, source_ids = (prompt_ids(session, n) for n in ("clean", target, source))
    reference_clean = reference_logits(session.model, clean_ids, clean_ids, [], mask, ablation, position, clamp_hooks)
    atol = metric_atol(session, float(reference_clean.abs().max()))
    for cell, patches in cells.cell_patches.items():
        logits = reference_logits(session.model, target_ids, source_ids, patches, mask, ablation, position,
                                  clamp_hooks)
        expected = metric_of(metric, logits, reference_clean, session.n_vocab)
        assert abs(grid.raw[cell] - expected) <= atol, (what, cell, grid.raw[cell], expected)
    return grid
