"""An SAE attached to a model: its module on the model's device, the hook point it reads and
the activation as it reads it (model/sae/processing.py)."""

from __future__ import annotations

import torch

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sae.hook_points import HookPointSpec, hook_point, width
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
        need = width(self.spec, model.config)
        if loaded.config.d_in != need:  # loaded for another model
            raise ModelError(f"the SAE {loaded.name} reads {loaded.config.d_in:,}-wide activations, and {self.spec.name} "
                             f"of this model is {need:,} wide; open it again for this model")
        device = next(model.parameters()).device
        self.module = loaded.module.to(device)
        self._model = model
        self.input = ActivationInput(loaded.config.processing, self.spec, model)

    def follow(self, device: torch.device) -> None:
        """Keep the module on the model's device (the model may move after attaching)."""
        if self.module.W_dec.device != device:
            # Ordinary tensors even when a run in inference mode moves it: attribution patching
            # takes gradients through a clamp's hook, which inference tensors cannot record.
            with torch.inference_mode(False):
                self.module.to(device)
                self.input = ActivationInput(self.config.processing, self.spec, self._model)

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        """(..., d_sae) features of the hooked activation x, and what decoding needs."""
        return self.module.encode_with_stats(self.input(x))
