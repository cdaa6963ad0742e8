"""An SAELens `cfg.json`, in either layout, read into checked values.

SAELens 6 writes the SAE's own fields at the top (`architecture`, `d_in`, `d_sae`, `dtype`,
`apply_b_dec_to_input`, `normalize_activations`, `k`, `rescale_acts_by_decoder_norm`, ...) and
what it was trained on under `metadata` (`hook_name`, `model_name`, `context_size`,
`model_class_name`, `model_from_pretrained_kwargs`, `sae_lens_version`). Before 6 everything
sat at the top, with `hook_point` for `hook_name`, `activation_fn_str` for `activation_fn`, a
TopK SAE written as `activation_fn: "topk"` with `activation_fn_kwargs.k`, and
`normalize_activations` possibly a bool (true: expected_average_only_in). As SAELens's own
`handle_config_defaulting` does, a file without a version of 6 or later is read as the old layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sae.config import ARCHITECTURES, NORMALIZATIONS

MAX_WIDTH = 1 << 31  # d_in or d_sae past this is no SAE (the memory budget refuses far less)
MAX_CONTEXT = 1 << 31
_RENAMED = {"hook_point": "hook_name", "activation_fn_str": "activation_fn", "hook_point_head_index": "hook_head_index"}
FIX = "fix its cfg.json or re-save the SAE with SAELens"


@dataclass(frozen=True)
class SaeLensConfig:
    """What a cfg.json says, checked for type and range (not yet against the model)."""

    architecture: str
    d_in: int
    d_sae: int
    hook_name: str | None
    k: int | None
    apply_b_dec_to_input: bool
    normalize_activations: str
    rescale_acts_by_decoder_norm: bool
    model_name: str
    context_size: int | None
    model_class_name: str | None
    model_from_pretrained_kwargs: dict | None
    dtype: str
    layout: str  # "SAELens 6" or "SAELens before 6"


def version_major(text: object) -> int | None:
    m = re.match(r"^\s*(\d{1,4})\.", text) if isinstance(text, str) else None
    return int(m.group(1)) if m else None


def read(raw: dict, where: str) -> SaeLensConfig:
    """The checked config of `raw` (a cfg.json object); anything unsupported is one ModelError."""
    metadata = raw.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise ModelError(f"{where}: its metadata is not an object; {FIX}")
    version = version_major(raw.get("sae_lens_version") or metadata.get("sae_lens_version"))
    modern = version is not None and version >= 6
    top = raw if modern else {_RENAMED.get(k, k): v for k, v in raw.items()}

    def get(key, default=None):
        if key in top:
            return top[key]
        return metadata.get(key, default)

    architecture = get("architecture", "standard")
    activation = get("activation_fn", "relu")
    k = None
    if not modern and activation == "topk":
        kwargs = get("activation_fn_kwargs") or {}
        if not isinstance(kwargs, dict) or kwargs.get("k") is None:
            raise ModelError(f"{where}: a TopK SAE without activation_fn_kwargs.k; {FIX}")
        architecture, k = "topk", kwargs["k"]
    if not isinstance(architecture, str) or architecture not in ARCHITECTURES:
        raise ModelError(f"{where}: architecture {str(architecture)[:40]!r} is not supported; this viewer reads "
                         f"{', '.join(ARCHITECTURES)} SAEs")
    if architecture != "topk" and activation not in ("relu", None):
        raise ModelError(f"{where}: activation function {str(activation)[:40]!r} is not supported (relu for "
                         f"{architecture} SAEs); {FIX}")
    d_in = _count(get("d_in"), "d_in", where, MAX_WIDTH)
    d_sae = _count(get("d_sae"), "d_sae", where, MAX_WIDTH)
    if architecture == "topk":
        k = _count(get("k") if k is None else k, "k", where, MAX_WIDTH)
        if k > d_sae:
            raise ModelError(f"{where}: TopK keeps k = {k:,} features of only {d_sae:,}; {FIX}")
    normalize = get("normalize_activations", "none")
    if isinstance(normalize, bool) and not modern:
        normalize = "expected_average_only_in" if normalize else "none"
    if normalize is None:
        normalize = "none"
    if not isinstance(normalize, str) or normalize not in NORMALIZATIONS:
        raise ModelError(f"{where}: normalize_activations {str(normalize)[:40]!r} is not supported; this viewer "
                         f"reads {', '.join(NORMALIZATIONS)}")
    if get("finetuning_scaling_factor", False) not in (False, None):
        raise ModelError(f"{where}: a finetuning scaling factor is not supported; fold it into W_dec and re-save")
    head = get("hook_head_index")
    if head is not None:
        raise ModelError(f"{where}: an SAE of one head's activations (hook_head_index {str(head)[:10]}) is not "
                         "supported; use an SAE of the whole hook point")
    if get("reshape_activations", "none") not in ("none", "hook_z", None):
        raise ModelError(f"{where}: reshape_activations {str(get('reshape_activations'))[:20]!r} is not supported (none "
                         f"or hook_z); {FIX}")
    hook_name = get("hook_name")
    if hook_name is not None and not (isinstance(hook_name, str) and 0 < len(hook_name) <= 200):
        raise ModelError(f"{where}: hook_name is not a hook point's name; {FIX}")
    context = get("context_size")
    context = None if context is None else _count(context, "context_size", where, MAX_CONTEXT)
    model_class = get("model_class_name")
    return SaeLensConfig(
        architecture=architecture, d_in=d_in, d_sae=d_sae, hook_name=hook_name, k=k,
        apply_b_dec_to_input=_flag(get("apply_b_dec_to_input", True), "apply_b_dec_to_input", where),
        normalize_activations=normalize,
        rescale_acts_by_decoder_norm=_flag(get("rescale_acts_by_decoder_norm", False),
                                           "rescale_acts_by_decoder_norm", where),
        model_name=_text(get("model_name"), 200), context_size=context,
        model_class_name=_text(model_class, 100) or None,
        model_from_pretrained_kwargs=get("model_from_pretrained_kwargs"),
        dtype=_text(get("dtype"), 40) or "float32",
        layout="SAELens 6" if modern else "SAELens before 6",
    )


def _count(value: object, name: str, where: str, limit: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
        raise ModelError(f"{where}: {name} is {str(value)[:30]!r}, not a whole number from 1 to {limit:,}; {FIX}")
    return value


def _flag(value: object, name: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise ModelError(f"{where}: {name} is {str(value)[:30]!r}, not true or false; {FIX}")
    return value


def _text(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""
