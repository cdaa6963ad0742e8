"""The SAEs a session holds beside its model: attaching and detaching them, the hooks that
apply an Intervention's feature clamps, and an SAE's hooked activation in a run.

A mixin of `Session` (model/capture/session.py). Each attached SAE keeps the index
`attach_sae` gave it until it is detached (indices are never reused, so a clamp never silently
moves to another SAE).
"""

from __future__ import annotations

import torch

from transformer_viewer.model.capture.feature_clamps import check_clamps, clamp_hooks, clamp_layers
from transformer_viewer.model.capture.interventions import Intervention
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sae.attached import AttachedSae
from transformer_viewer.model.sae.loading import LoadedSae


class _Taken(Exception):
    """Stops a block's forward once the activation it was run for has passed."""


class SaeAttachments:
    """attach_sae, detach_sae, sae, intervention_hooks, sae_activation; Session supplies the model."""

    def _init_saes(self) -> None:
        self.saes: dict[int, AttachedSae] = {}
        self._next_sae = 0

    def attach_sae(self, loaded: LoadedSae) -> int:
        """Hold `loaded` (from `load_sae` for this model) beside the model; its index."""
        attached = AttachedSae(loaded, self.model)
        index = self._next_sae
        self._next_sae += 1
        self.saes[index] = attached
        return index

    def detach_sae(self, index: int) -> None:
        """Let SAE `index` go; an Intervention still clamping it is refused from now on."""
        self.sae(index)
        del self.saes[index]

    def sae(self, index: int) -> AttachedSae:
        sae = self.saes.get(index) if isinstance(index, int) else None
        if sae is None:
            held = ", ".join(str(i) for i in sorted(self.saes)) or "none"
            raise ModelError(f"SAE {index} is not open (open: {held}); open an SAE first")
        sae.follow(self.device)
        return sae

    def intervention_hooks(self, change: Intervention, start_layer: int = 0,
                           total: int | None = None) -> list[tuple[str, object]]:
        """(hook name, hook) pairs applying `change` (head mask, then clamps) to layers >= start_layer;
        `total`: as `clamp_hooks`'s."""
        return change.without_clamps().hooks(start_layer) + self.clamp_hooks(change, start_layer, total)

    def clamp_hooks(self, change: Intervention, start_layer: int = 0,
                    total: int | None = None) -> list[tuple[str, object]]:
        """The hooks of `change`'s feature clamps alone (none without clamps). `total`: the
        prompt's length where a run computes only its last rows (feature_clamps.clamp_hooks)."""
        if not change.clamps:
            return []
        check_clamps(change.clamps, self.saes)
        for index in {c.sae for c in change.clamps}:
            self.saes[index].follow(self.device)
        return clamp_hooks(change.clamps, self.saes, start_layer, total)

    def _clamps_start(self, change: Intervention, other: Intervention) -> int:
        """The first layer whose computation the two Interventions' clamps make differ (n_layer: none)."""
        if change.clamps == other.clamps:
            return self.config.n_layer
        check_clamps(change.clamps, self.saes)
        return min(clamp_layers(change.clamps + other.clamps, self.saes), default=0)

    def residuals_under(self, intervention: Intervention | None = None) -> list[torch.Tensor]:
        """`masked_residuals(intervention)`, after a clean run of the prompt when none is cached."""
        if self._resid is None:
            self.run(None, None, None, logprobs=False)  # the clean run, cached once
        return self.masked_residuals(self._intervention(intervention, None))

    @torch.inference_mode()
    def sae_activation(self, index: int, intervention: Intervention | None = None) -> torch.Tensor:
        """The activation SAE `index` reads, (1, T, ...) as its hook point holds it, in the run of
        the prompt under `intervention` (None: the clean run), from the session's cached
        residual stream: no forward over the layers before the SAE's."""
        sae = self.sae(index)
        change = self._intervention(intervention, None)
        resid = self.residuals_under(change)
        spec = sae.spec
        if spec.point == "hook_resid_pre":
            return resid[spec.layer]
        if spec.point == "hook_resid_post":
            return resid[spec.layer + 1]
        seen = {}

        def take(_m, _inputs, activation):
            seen["x"] = activation
            raise _Taken

        prefix = f"blocks.{spec.layer}."
        named = [(n, h) for n, h in self.intervention_hooks(change, spec.layer) if n.startswith(prefix)]
        try:
            with self._scratch_attention(), hooks(self.model, [*named, (spec.name, take)]):
                self.model.blocks[spec.layer](resid[spec.layer])
        except _Taken:
            pass
        return seen["x"]
