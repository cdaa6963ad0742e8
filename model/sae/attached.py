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
        self._model = model
        with torch.inference_mode(False):  # ordinary tensors, whatever mode it is attached in
            self.module = ordinary_tensors(loaded.module.to(device))
            self.input = ActivationInput(loaded.config.processing, self.spec, model)

    def follow(self, device: torch.device) -> None:
        """Keep the module on the model's device (the model may move after attaching)."""
        if self.module.W_dec.device != device:
            # Ordinary tensors even when a run in inference mode moves it: attribution patching
            # takes gradients through a clamp's hook, which inference tensors cannot record.
            with torch.inference_mode(False):
                ordinary_tensors(self.module.to(device))
                self.input = ActivationInput(self.config.processing, self.spec, self._model)

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        """(..., d_sae) features of the hooked activation x, and what decoding needs."""
        return self.module.encode_with_stats(self.input(x))


def ordinary_tensors(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with any inference tensor among its parameters and buffers (an SAE loaded inside
    `torch.inference_mode`, as the command line loads) replaced by an ordinary copy: attribution
    patching takes gradients through a clamp's hook, and autograd cannot record inference
    tensors. Call outside inference mode."""
    for part in module.modules():
        for name, p in list(part._parameters.items()):
            if p is not None and p.is_inference():
                part._parameters[name] = torch.nn.Parameter(p.clone(), requires_grad=p.requires_grad)
        for name, b in list(part._buffers.items()):
            if b is not None and b.is_inference():
                part._buffers[name] = b.clone()
    return module
