"""Which of the model's hook points an SAE may read, their widths, and SAELens's names for them.

SAELens names hook points as TransformerLens does, which are the viewer's names too
(`blocks.L.hook_resid_pre`, `hook_resid_mid`, `hook_resid_post`, `hook_attn_out`,
`hook_mlp_out`, `attn.hook_z`, `mlp.hook_post`). An SAE trained through a Hugging Face model
(`model_class_name: AutoModelForCausalLM`) names the module whose output it read; a decoder
layer's output (`model.layers.L`, `transformer.h.L`, `gpt_neox.layers.L`) is our
`blocks.L.hook_resid_post`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from transformer_viewer.model.errors import ModelError

# Our names within a block, and what they hold.
BLOCK_POINTS = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
                "attn.hook_z", "mlp.hook_post")
RESIDUAL_WRITES = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out")
_OURS = re.compile(r"^blocks\.(\d{1,6})\.(" + "|".join(re.escape(p) for p in BLOCK_POINTS) + r")$")
_HF_LAYER = re.compile(r"^(?:model\.layers|model\.language_model\.layers|transformer\.h|gpt_neox\.layers)\.(\d{1,6})$")


@dataclass(frozen=True)
class HookPointSpec:
    """A hook point of the model: its name, its block and what sits there."""

    name: str  # "blocks.3.hook_resid_post"
    layer: int
    point: str  # one of BLOCK_POINTS

    @property
    def is_residual(self) -> bool:
        """A (B, T, n_embd) activation in the residual stream's basis."""
        return self.point in RESIDUAL_WRITES

    @property
    def is_z(self) -> bool:
        return self.point == "attn.hook_z"

    @property
    def rerun_layer(self) -> int:
        """The block a run must start from for an edit here to take effect: the session caches
        each block's input, so an edit at a block's input belongs to the block before it."""
        return self.layer - 1 if self.point == "hook_resid_pre" else self.layer

    @property
    def edit_name(self) -> str:
        """Where an edit of this activation is applied: the block's input is the previous block's
        output (the same tensor), edited there so the cached input of this block includes it."""
        if self.point == "hook_resid_pre" and self.layer > 0:
            return f"blocks.{self.layer - 1}.hook_resid_post"
        return self.name


def our_name(name: str) -> str:
    """SAELens's (TransformerLens's) or a Hugging Face module's hook name as the viewer's."""
    m = _HF_LAYER.match(name)
    return f"blocks.{m.group(1)}.hook_resid_post" if m else name


def hook_point(name: str, config) -> HookPointSpec:
    """The checked hook point `name` (ours or SAELens's) of a model of `config`."""
    name = our_name(name.strip())
    m = _OURS.match(name)
    L = config.n_layer
    if m is None:
        raise ModelError(f"hook point {name[:80]!r} does not exist in this model; an SAE can read "
                         f"blocks.L.{{{', '.join(BLOCK_POINTS)}}} for L in 0..{L - 1}")
    layer = int(m.group(1))
    if layer >= L:
        raise ModelError(f"hook point {name!r} does not exist in this model: its layers are 0..{L - 1}")
    return HookPointSpec(name, layer, m.group(2))


def width(spec: HookPointSpec, config) -> int:
    """The activation's width at that point, as an SAE reads it (hook_z's heads concatenated)."""
    if spec.is_z:
        return config.n_head * config.head_size
    if spec.point == "mlp.hook_post":
        return config.n_mlp
    return config.n_embd
