"""An SAE attached to a model: its module on the model's device, the hook point it reads and
the activation as it reads it (model/sae/processing.py)."""

from __future__ import annotations

import torch

from transformer_viewer.model.sae.hook_points import HookPointSpec, hook_point
from transformer_viewer.model.sae.loading import LoadedSae
from transformer_viewer.model.sae.module import Stats
from transformer_viewer.model.sae.processing import ActivationInput


class AttachedSae:
    """`loaded` beside `model` (a GPT): `features(x)` of a hooked activation, `spec` its hook point."""

    def __init__(self, loaded: LoadedSae, model):
        self.loaded = loaded
        self.config = loaded.config
        self.name = loaded.name
        self.spec: HookPointSpec = hook_point(loaded.config.hook, model.config)
        device = next(model.parameters()).device
        self.module = loaded.module.to(device)
        self.input = ActivationInput(loaded.config.processing, self.spec, model)

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        """(..., d_sae) features of the hooked activation x, and what decoding needs."""
        return self.module.encode_with_stats(self.input(x))
