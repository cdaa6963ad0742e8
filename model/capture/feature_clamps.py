"""Feature clamps as hooks: at an SAE's hook point the activation x becomes
x + (dec(a') - dec(a)), with a the SAE's features of x and a' the clamped ones.

The difference is computed as the decoder applied to a' - a (`decode_difference`), so a token
no clamp touches keeps its activation bit for bit, and with no clamp there is no hook at all:
the model is exactly unchanged (no float32 round trip through the reconstruction).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from transformer_viewer.model.errors import ModelError


def check_clamps(clamps: Sequence, saes: dict) -> None:
    """Each clamp names an attached SAE, one of its features, and a hook point it can edit."""
    for c in clamps:
        sae = saes.get(c.sae)
        if sae is None:
            held = ", ".join(str(i) for i in sorted(saes)) or "none"
            raise ModelError(f"clamp {c.describe()} names SAE {c.sae}, which is not open (open: {held}); open it first")
        if c.feature >= sae.config.d_sae:
            raise ModelError(f"clamp {c.describe()}: SAE {c.sae} has features 0..{sae.config.d_sae - 1}")
        if sae.spec.rerun_layer < 0:
            raise ModelError(f"clamp {c.describe()}: {sae.spec.name} is the embedding itself, which a run does not "
                             "recompute; clamp an SAE of a later hook point")


def clamp_layers(clamps: Sequence, saes: dict) -> list[int]:
    """The first layer each clamp's run must recompute: 0 for a clamp of an SAE no longer held
    (a cached run it shaped is not recomputed from anywhere later)."""
    return [max(0, saes[c.sae].spec.rerun_layer) if c.sae in saes else 0 for c in clamps]


def clamp_hooks(clamps: Sequence, saes: dict, start_layer: int = 0,
                total: int | None = None) -> list[tuple[str, object]]:
    """(hook name, hook) pairs applying `clamps` (already checked) to a run from `start_layer`;
    a clamp before it is already in the cached input the run starts from.

    `total`: the prompt's length where a run computes only its last rows (a block run from
    `first_row`, whose hooks see rows first_row..total-1): each hook places a clamp's position
    by counting from the end; a position before the rows it sees is left alone (the run's cached
    rows already hold it). None: each hook sees every row from position 0."""
    by_sae: dict[int, list] = {}
    for c in clamps:
        if saes[c.sae].spec.rerun_layer >= start_layer:
            by_sae.setdefault(c.sae, []).append(c)
    return [(saes[i].spec.edit_name, _clamp_hook(saes[i], cs, total)) for i, cs in by_sae.items()]


def _clamp_hook(sae, clamps: list, total: int | None = None):
    every = any(c.position is None for c in clamps)
    positions = sorted({c.position for c in clamps if c.position is not None})
    features = sorted({c.feature for c in clamps})
    column = {f: i for i, f in enumerate(features)}  # feature -> its column among `features`

    def hook(_module, _inputs, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        first = 0 if total is None else total - T  # the position of the first row this hook sees
        if every:
            rows, part, row = None, x, None  # (B, T, ...)
        else:
            # A position past the rows run cannot reach them; one before them is in the cached rows.
            kept = [p for p in positions if first <= p < first + T]
            if not kept:
                return x
            rows = torch.tensor([p - first for p in kept], device=x.device)
            part = x[:, rows]  # (B, P, ...)
            row = {p: i for i, p in enumerate(kept)}
        cols = torch.tensor(features, device=x.device)
        a, stats = sae.module.encode_features(sae.input(part), cols)  # (B, T or P, n_features)
        clamped = a.clone()
        for c in clamps:
            if c.position is None:
                target = clamped[..., column[c.feature]]
            elif row is None:
                target = clamped[:, c.position - first, column[c.feature]] if first <= c.position < first + T else None
            else:
                target = clamped[:, row[c.position], column[c.feature]] if c.position in row else None
            if target is None:
                continue
            if c.kind == "set":
                target.fill_(c.value)
            else:
                target.mul_(c.value)
        delta = sae.input.back(sae.module.decode_difference(clamped, a, stats, cols), part)
        if rows is None:
            return x + delta
        out = x.clone()  # a new tensor, never an edit of x: other hooks may hold it
        out[:, rows] += delta
        return out
    return hook
