"""The activations an SAE was trained on: TransformerLens's processing of the model, reproduced.

Many published SAEs read a TransformerLens `HookedTransformer`, which SAELens loads with
`from_pretrained_no_processing(**model_from_pretrained_kwargs)`: processing only as those
keyword arguments say. Two of them change an activation an SAE reads:

- `center_writing_weights` (LayerNorm models only; TransformerLens skips it under RMSNorm):
  every weight and bias writing to the residual stream is centred over d_model, so every
  residual activation (resid_pre/mid/post, attn_out, mlp_out) is ours less its mean over
  d_model ("center residual").
- `fold_value_biases`: the value bias moves into the output bias (each pattern row sums to 1),
  so `attn.hook_z` is ours less the value bias of each head ("fold value biases").

`refactor_factored_attn_matrices` rotates the heads' value space itself and is refused for
hook_z SAEs; the other arguments change nothing an SAE here can read. `resolve` decides from
the file's words and the model; `ActivationInput` applies the result to a hooked activation.
"""

from __future__ import annotations

import torch

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sae.config import CENTER_RESIDUAL, FOLD_VALUE_BIASES
from transformer_viewer.model.sae.hook_points import HookPointSpec

# Keyword arguments of from_pretrained that change nothing an SAE here reads.
NO_EFFECT = frozenset({
    "fold_ln", "center_unembed", "dtype", "torch_dtype", "device", "n_devices", "device_map",
    "default_prepend_bos", "trust_remote_code", "revision", "first_n_layers", "move_to_device",
    "use_attn_result", "use_split_qkv_input", "use_hook_mlp_in", "use_attn_in", "n_ctx",
    "default_padding_side", "checkpoint_index", "checkpoint_value", "hf_model", "tokenizer",
})
TRANSFORMER_LENS = "HookedTransformer"


def resolve(kwargs: dict | None, model_class_name: str | None, spec: HookPointSpec, model_config,
            where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(steps, warnings): the processing the SAE's activations need on this model, and lines
    about what was not reproduced; a processing that cannot be reproduced is one ModelError."""
    if model_class_name not in (None, TRANSFORMER_LENS):
        return (), ()  # a Hugging Face model (or another library's): activations as computed
    kwargs = kwargs or {}
    if not isinstance(kwargs, dict):
        raise ModelError(f"{where}: metadata.model_from_pretrained_kwargs is not an object; fix its cfg.json")
    steps, warnings = [], []
    layer_norm = model_config.norm in ("layernorm", "layernorm_plain")
    if _true(kwargs, "center_writing_weights", where) and spec.is_residual and layer_norm:
        steps.append(CENTER_RESIDUAL)
    if _true(kwargs, "fold_value_biases", where) and spec.is_z and model_config.uses_bias("qkv"):
        steps.append(FOLD_VALUE_BIASES)
    if _true(kwargs, "refactor_factored_attn_matrices", where) and spec.is_z:
        raise ModelError(f"{where}: trained on TransformerLens's refactor_factored_attn_matrices, which rotates "
                         "the heads' values: its hook_z activations cannot be reproduced; use an SAE of another hook")
    unknown = sorted(k for k in kwargs if k not in NO_EFFECT and k not in
                     ("center_writing_weights", "fold_value_biases", "refactor_factored_attn_matrices"))
    if unknown:
        warnings.append(f"model_from_pretrained_kwargs {', '.join(k[:40] for k in unknown[:5])} not understood; "
                        "read as changing nothing")
    return tuple(steps), tuple(warnings)


def _true(kwargs: dict, key: str, where: str) -> bool:
    value = kwargs.get(key, False)
    if not isinstance(value, bool):
        raise ModelError(f"{where}: model_from_pretrained_kwargs.{key} is {str(value)[:20]!r}, not true or false; "
                         "fix its cfg.json")
    return value


def describe(steps: tuple[str, ...]) -> str:
    return ", ".join(steps) if steps else "no processing"


class ActivationInput:
    """A hooked activation as the SAE reads it, (..., d_in) float32, and an SAE-space difference
    back in the hook's shape and dtype. hook_z's heads are concatenated, (B, T, nh, hs) ->
    (B, T, nh * hs), as SAELens's hook_z reshaping does."""

    def __init__(self, steps: tuple[str, ...], spec: HookPointSpec, model):
        self.steps = steps
        self.spec = spec
        self.value_bias = None
        if FOLD_VALUE_BIASES in steps:
            attn = model.blocks[spec.layer].attn
            nh, nkv, hs = attn.n_head, attn.n_kv_head, attn.head_size
            b_v = attn.c_attn.bias.detach()[(nh + nkv) * hs:].float().view(nkv, hs)  # (nkv, hs)
            self.value_bias = b_v.repeat_interleave(nh // nkv, dim=0)  # (nh, hs): each query head's value head

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if self.value_bias is not None:
            x = x - self.value_bias.to(x.device)
        if self.spec.is_z:
            x = x.flatten(-2)  # (..., nh * hs)
        if CENTER_RESIDUAL in self.steps:
            x = x - x.mean(dim=-1, keepdim=True)
        return x

    def back(self, delta: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """A difference in the SAE's input space as a change of the hooked activation `like`:
        both processings are shifts, so a difference passes through them unchanged."""
        return delta.view(like.shape).to(like.dtype)
