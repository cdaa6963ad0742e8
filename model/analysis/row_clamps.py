"""An Intervention's feature clamps at one query row, for the direct-effect analyses.

The direct-effect analyses recompute a block's writes at one position from its cached input
instead of running the block. A clamp's hook (`feature_clamps.clamp_hooks`) edits each row it
sees on its own, placing its positions from the end of the prompt when told the prompt's length:
the same hooks applied to the one-row activation (1, 1, ...) of position q, with the prompt
taken to end at q, make exactly the edit the clamped run made there. `RowClamps.edit` returns
that edit as the activation plus the clamp's addition, so each analysis can keep the addition
apart from the writer whose output the SAE read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer_viewer.model.capture.feature_clamps import check_clamps, clamp_hooks
from transformer_viewer.model.capture.interventions import Intervention


@dataclass(frozen=True)
class RowClamps:
    """The clamp hooks of one block at one query row, by point within the block
    ("attn.hook_z", "hook_attn_out", "hook_resid_mid", "mlp.hook_post", "hook_mlp_out",
    "hook_resid_post"; a clamp of the next block's resid_pre is edited at this block's
    resid_post), each point's hooks in the order the run applies them."""

    by_point: dict[str, list]

    def has(self, point: str) -> bool:
        return bool(self.by_point.get(point))

    def edit(self, point: str, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the edited activation, what the clamps added) at `point` for the activation `row`
        (1, 1, ...) of the query position; (row, None) where no clamp sits at that point."""
        if not self.has(point):
            return row, None
        out = row
        for hook in self.by_point[point]:
            out = hook(None, (), out)
        return out, out - row


def row_clamps(session, change: Intervention, q: int) -> dict[int, RowClamps]:
    """`change`'s feature clamps at query position q, by the block that applies them ({} without
    clamps: an analysis then takes its unclamped path, bit for bit)."""
    if not change.clamps:
        return {}
    check_clamps(change.clamps, session.saes)
    for index in {c.sae for c in change.clamps}:
        session.sae(index)  # on the model's device
    by_layer: dict[int, dict[str, list]] = {}
    for name, hook in clamp_hooks(change.clamps, session.saes, 0, total=q + 1):
        _blocks, layer, point = name.split(".", 2)  # "blocks.3.attn.hook_z"
        by_layer.setdefault(int(layer), {}).setdefault(point, []).append(hook)
    return {layer: RowClamps(points) for layer, points in by_layer.items()}


def edit_row(clamps: RowClamps | None, point: str, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the residual-width activation at `point` after the clamps there, their addition or None)
    for the query row's activation `row` (C,), in float32."""
    if clamps is None or not clamps.has(point):
        return row, None
    edited, delta = clamps.edit(point, row[None, None])  # as the hook holds it, (1, 1, C)
    return edited[0, 0].float(), delta[0, 0].float()


def added(*deltas: torch.Tensor | None) -> torch.Tensor | None:
    """The sum of the clamps' additions given (None: none of them), in float32."""
    kept = [d.float() for d in deltas if d is not None]
    if not kept:
        return None
    total = kept[0]
    for d in kept[1:]:
        total = total + d
    return total
