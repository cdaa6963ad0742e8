"""Head masks as hooks on `blocks.{l}.attn.hook_z`: the head's output is removed (zero) or
replaced by its mean over the prompt's positions (mean) before the output projection.

`check_intervention` is the one place a mask and an ablation from outside are checked; every
function that takes them (capture, prediction, the lens, scans, generation) calls it first.
"""

from __future__ import annotations

import numpy as np
import torch

from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import ModelError

ABLATIONS = ("zero", "mean")


def check_intervention(config: GPTConfig, mask, ablation: str, what: str = "head mask") -> np.ndarray:
    """`mask` as a fresh (n_layer, n_head) bool array (None: no head masked), once it and
    `ablation` are known to fit the model. `what` names the mask in the message."""
    if ablation not in ABLATIONS:
        raise ModelError(f"ablation must be one of {', '.join(ABLATIONS)}, got {ablation!r}")
    L, nh = config.n_layer, config.n_head
    if mask is None:
        return np.zeros((L, nh), dtype=bool)
    mask = np.array(mask, dtype=bool)  # a copy: callers keep it past the caller's edits
    if mask.shape != (L, nh):
        raise ModelError(f"{what} has shape {mask.shape}; this model needs ({L}, {nh})")
    return mask


def head_mask_hooks(mask: np.ndarray, ablation: str, start_layer: int = 0) -> list[tuple[str, object]]:
    """(hook name, hook) pairs that apply `mask` (L, nh) to layers >= start_layer, in every
    batch element alike."""
    return batched_head_mask_hooks(np.asarray(mask)[None], ablation, start_layer)


def batched_head_mask_hooks(masks: np.ndarray, ablation: str, start_layer: int = 0) -> list[tuple[str, object]]:
    """Like `head_mask_hooks` for a batch of runs: masks (B, L, nh), masks[b] applied to batch
    element b (a single mask, B = 1, to all), with the same arithmetic as a run of its own."""
    named = []
    for layer in range(start_layer, masks.shape[1]):
        rows = masks[:, layer]  # (B, nh)
        if rows.any():
            # A copy: the caller's mask may be read-only (a trace's) or change after this returns.
            named.append((f"blocks.{layer}.attn.hook_z", _ablate_rows(torch.tensor(rows), ablation)))
    return named


def _ablate_rows(masked: torch.Tensor, ablation: str):
    # A new tensor, never an edit of z: other hooks may hold it.
    def hook(_module, _inputs, z: torch.Tensor) -> torch.Tensor:
        m = masked.to(z.device)[:, None, :, None]  # (B, 1, nh, 1) against z's (B, T, nh, hs)
        if ablation == "zero":
            return torch.where(m, torch.zeros((), dtype=z.dtype, device=z.device), z)
        return torch.where(m, z.mean(dim=1, keepdim=True), z)  # each run's own mean over positions
    return hook


def first_changed_layer(old_mask: np.ndarray, old_ablation: str, new_mask: np.ndarray, new_ablation: str) -> int:
    """The first layer whose computation differs between two mask settings (n_layer if none)."""
    L = new_mask.shape[0]
    for layer in range(L):
        if not np.array_equal(old_mask[layer], new_mask[layer]):
            return layer
        if old_ablation != new_ablation and new_mask[layer].any():
            return layer
    return L
