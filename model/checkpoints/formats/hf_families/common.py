"""What every Hugging Face family mapping shares: reading config.json values with their types
checked, the rotary settings in both forms configs come in, and taking tensors out of a state
dict by name so nothing is missed or left over.

Configs come in two forms: the one published checkpoints carry (`rope_theta`, `rope_scaling`,
`rotary_pct`, `rotary_emb_base`, `rope_local_base_freq`) and the one recent `transformers`
writes (`rope_parameters`, per layer type for Gemma 3). Both map onto the same GPTConfig.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from transformer_viewer.model.checkpoints import load_watch
from transformer_viewer.model.checkpoints.formats.schema import (
    check_rope_fields,
    describe_value,
    rope_field_problem,
)
from transformer_viewer.model.decoder.config import GPTConfig, float32_problem
from transformer_viewer.model.errors import CheckpointError

# HF activation names -> ours. "gelu_new" and "gelu_pytorch_tanh" are the same tanh curve.
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
               "gelu": "gelu", "relu": "relu"}
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope", "dynamic")
FIX_VALUE = "correct the value in config.json or restore the model's own config.json"


@dataclass(frozen=True)
class Family:
    """One architecture: its display name, config.json -> GPTConfig, HF state -> ours."""

    name: str
    config: Callable[[Fields], dict]  # GPTConfig fields
    weights: Callable[[Tensors, GPTConfig], None]  # fills Tensors.out
    prefixes: tuple[str, ...] = ("model.",)  # of the body's tensors in a *ForCausalLM file; the first found is used
    heads: tuple[str, ...] = ("lm_head.weight",)  # the untied head's possible names
    skip: tuple[str, ...] = ()  # prefixes of tensors the decoder does not run (a vision tower): never read


# Multimodal checkpoints built as a `language_model` beside a `vision_tower` (Gemma 3, Mistral 3):
# where the text decoder's tensors and head are, in the published layout first, then in the one
# recent transformers keeps in memory; the vision tower and its projector are never read.
LANGUAGE_MODEL_LAYOUT = dict(
    prefixes=("language_model.model.", "model.language_model."),
    heads=("lm_head.weight", "language_model.lm_head.weight"),
    skip=("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."))


class Fields:
    """config.json values, each checked for its type before use (the file is untrusted)."""

    def __init__(self, hf: dict, folder: str, arch: str):
        self.hf, self.folder, self.arch = hf, folder, arch

    def bad(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.folder}: bad config.json for {self.arch}: {what}")

    def refuse(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.folder}: {self.arch} with {what} is not supported: this decoder cannot "
                               "compute it exactly, so the model is not loaded")

    def get(self, key: str, default=None):
        value = self.hf.get(key)
        return default if value is None else value

    def int(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default)
        if value is None:
            raise self.bad(f"{key} is missing; restore the model's config.json")
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.bad(f"{key} must be an integer, got {describe_value(value)}")
        return value

    def num(self, key: str, default: float | None = None, where: dict | None = None) -> float:
        value = (self.hf if where is None else where).get(key)
        value = default if value is None else value
        if value is None:
            raise self.bad(f"{key} is missing; restore the model's config.json")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.bad(f"{key} must be a finite number, got {describe_value(value)}")
        problem = float32_problem(float(value))
        if problem:  # the decoder computes in float32: 1e-300 would be a zero divisor there
            raise self.bad(f"{key}: {problem}; {FIX_VALUE}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.bad(f"{key} must be true or false, got {describe_value(value)}")
        return value

    def activation(self, *keys: str, default: str, legacy_gelu_tanh: bool = False) -> str:
        name = next((self.hf[k] for k in keys if self.hf.get(k) is not None), default)
        if legacy_gelu_tanh and name == "gelu":
            return "gelu_tanh"  # Gemma's published configs say "gelu" and mean the tanh curve
        if not isinstance(name, str) or name not in ACTIVATIONS:
            raise self.refuse(f"activation {describe_value(name)} (supported: {', '.join(ACTIVATIONS)})")
        return ACTIVATIONS[name]

    def text_decoder(self, tie: bool, flat: bool = False) -> Fields:
        """A multimodal config's text decoder: `text_config` (with `flat`, the top level itself
        when there is none, as Qwen2/2.5-VL publish it), with `tie` as its tie_word_embeddings,
        because transformers reads whether the head is tied at the top level."""
        text = self.hf.get("text_config")
        if text is None and flat:
            text = {k: v for k, v in self.hf.items() if k != "vision_config"}
        elif not isinstance(text, dict):
            raise self.bad(f"text_config must be an object, got {describe_value(text)}")
        return Fields({**text, "tie_word_embeddings": tie}, self.folder, self.arch)

    def layer_types(self, n_layer: int) -> tuple | None:
        """`layer_types` as ours ("full"/"sliding"), or None when the config has none."""
        types = self.hf.get("layer_types")
        if types is None:
            return None
        names = {"full_attention": "full", "sliding_attention": "sliding"}
        if not isinstance(types, list) or len(types) != n_layer or any(t not in names for t in types):
            raise self.bad(f"layer_types must list full_attention/sliding_attention for each of the {n_layer} "
                           f"layers, got {describe_value(types)}")
        return tuple(names[t] for t in types)

    def no_moe_or_alibi(self) -> None:
        for key in ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size"):
            value = self.hf.get(key)
            if value not in (None, 0, False):
                raise self.refuse(f"mixture-of-experts layers ({key}={describe_value(value)})")
        if self.hf.get("alibi") or self.hf.get("use_alibi"):
            raise self.refuse("ALiBi attention biases")

    # -- rotary ------------------------------------------------------------------------------
    def rope(self, default_theta: float = 10000.0, layer_type: str = "full_attention",
             theta_key: str = "rope_theta", partial_key: str = "partial_rotary_factor",
             default_partial: float = 1.0, aliases: dict | None = None) -> dict:
        """GPTConfig rotary fields from `rope_parameters` (per layer type or not) or the
        published `rope_theta` + `rope_scaling` (+ a partial rotary factor); `aliases`: a
        family's older names of a scaling type."""
        params = self.hf.get("rope_parameters")
        if params is not None:
            if not isinstance(params, dict):
                raise self.bad(f"rope_parameters must be an object, got {describe_value(params)}")
            where = "rope_parameters"
            if layer_type in params or "full_attention" in params:
                params, where = params.get(layer_type), f"rope_parameters.{layer_type}"
                if not isinstance(params, dict):
                    raise self.bad(f"rope_parameters has no object for {layer_type}")
            self._check_rope_fields(params, where)
        else:
            # Published Gemma 3 configs scale only the global layers' rotary.
            scaling = self.hf.get("rope_scaling") if layer_type == "full_attention" else None
            if scaling is not None and not isinstance(scaling, dict):
                raise self.bad(f"rope_scaling must be an object, got {describe_value(scaling)}")
            params = dict(scaling or {})
            self._check_rope_fields(params, "rope_scaling")
            for ours, key in (("rope_theta", theta_key), ("partial_rotary_factor", partial_key)):
                top = self.hf.get(key)
                problem = rope_field_problem(ours, top)
                if problem:
                    raise self.bad(f"{key} {problem}; {FIX_VALUE}")
                params.setdefault(ours, top)
        kind = params.get("rope_type", params.get("type")) or "default"
        kind = (aliases or {}).get(kind, kind) if isinstance(kind, str) else kind
        if kind not in ROPE_TYPES:
            raise self.refuse(f"rope scaling {describe_value(kind)} (supported: {', '.join(ROPE_TYPES)})")
        out = {"positional": "rotary", "rope_base": self.num("rope_theta", default_theta, params),
               "rotary_pct": self.num("partial_rotary_factor", default_partial, params)}
        if kind == "default":
            return out
        original = self._original_context(params)
        if kind == "longrope":  # transformers' default for longrope: the model's own context
            out.update(self._longrope(params, original or self.hf.get("max_position_embeddings")))
            return out
        if kind == "dynamic":
            return {**out, **self._dynamic(params)}
        out.update(rope_scaling=kind, rope_factor=self.num("factor", None if kind != "yarn" else 0.0, params))
        if kind == "llama3":
            out.update(rope_low_freq_factor=self.num("low_freq_factor", None, params),
                       rope_high_freq_factor=self.num("high_freq_factor", None, params),
                       rope_original_context=original)
        if kind == "yarn":
            out.update(self._yarn(params, original))
        return out

    def _original_context(self, params: dict) -> int | None:
        """original_max_position_embeddings: a top-level one (Phi-3 writes one) wins, as in
        transformers; the rotary parameters' own is checked with them (ROPE_FIELDS)."""
        top = self.hf.get("original_max_position_embeddings")
        if top is None:
            return params.get("original_max_position_embeddings")
        problem = rope_field_problem("original_max_position_embeddings", top)
        if problem:
            raise self.bad(f"original_max_position_embeddings {problem}; {FIX_VALUE}")
        return top

    def _check_rope_fields(self, params: dict, where: str) -> None:
        try:
            check_rope_fields(params, where)
        except ValueError as e:
            raise self.bad(f"{e}; {FIX_VALUE}") from None

    def sliding_rope_base(self, rotary_pct: float, default_theta: float, theta_key: str = "rope_theta") -> float:
        """The rotary base of the sliding layers (Gemma 3, OLMo 3), which must rotate unscaled and
        as much of each head as the full layers do: our sliding layers have only a base of their own."""
        local = self.rope(default_theta=default_theta, layer_type="sliding_attention", theta_key=theta_key)
        if local.get("rope_scaling", "none") != "none" or local["rotary_pct"] != rotary_pct:
            raise self.refuse("rope scaling on its sliding layers")
        return local["rope_base"]

    def _longrope(self, params: dict, original) -> dict:
        """Phi-3's: a factor per frequency (short and long sets); cos and sin scaled by
        sqrt(1 + ln(factor) / ln(original)), the factor being max_position_embeddings / original
        unless given."""
        if not isinstance(original, int) or isinstance(original, bool) or original < 2:
            raise self.bad(f"longrope needs an integer original_max_position_embeddings of 2 or more, got "
                           f"{describe_value(original)}")
        lists = {}
        for key in ("short_factor", "long_factor"):
            value = params.get(key)
            if not isinstance(value, list) or len(value) > 4096 or not all(
                    isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in value):
                raise self.bad(f"longrope's {key} must be a list of positive numbers, got {describe_value(value)}")
            lists[key] = tuple(float(x) for x in value)
        factor = params.get("factor")
        factor = self.int("max_position_embeddings") / original if factor is None else self.num("factor", None, params)
        attention = params.get("attention_factor")
        if attention is None:
            attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
        return {"rope_scaling": "longrope", "rope_factor": factor, "rope_original_context": original,
                "rope_short_factor": lists["short_factor"], "rope_long_factor": lists["long_factor"],
                "rope_attention_factor": self.num("attention_factor", attention, {"attention_factor": attention})}

    def _dynamic(self, params: dict) -> dict:
        """Dynamic NTK scaling: the base grows with a prompt past max_position_embeddings (which
        transformers reads as the original context, whatever original_max_position_embeddings
        says). Its point is longer prompts: `hf_families.config_for` makes the context factor
        times that."""
        original = self.int("max_position_embeddings")
        factor = self.num("factor", None, params)
        if not 1.0 <= factor <= 1024.0:
            raise self.bad(f"dynamic rope scaling's factor must be between 1 and 1024, got {factor:g}")
        return {"rope_scaling": "dynamic", "rope_factor": factor, "rope_original_context": original}

    def _yarn(self, params: dict, original) -> dict:
        if original is None:
            raise self.bad("yarn rope scaling needs original_max_position_embeddings")
        factor = self.num("factor", 0.0, params) or self.int("max_position_embeddings") / original
        attention = params.get("attention_factor")
        if attention is None:
            # mscale and mscale_all_dim are numbers of 0 or more (ROPE_FIELDS): each get_mscale
            # is at least 1, so the quotient has no zero divisor.
            mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")

            def get_mscale(scale, m=1.0):
                return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

            attention = (get_mscale(factor, mscale) / get_mscale(factor, mscale_all) if mscale and mscale_all
                         else get_mscale(factor))
        truncate = params.get("truncate", True)
        return {"rope_factor": factor, "rope_original_context": original, "rope_truncate": truncate,
                "rope_attention_factor": self.num("attention_factor", attention, {"attention_factor": attention}),
                "rope_beta_fast": self.num("beta_fast", 32.0, params), "rope_beta_slow": self.num("beta_slow", 1.0, params)}


class Tensors:
    """A checkpoint's tensors taken one by one into ours: each converted to float32 as it is
    taken and dropped from the source, so no two full copies of the model exist at once."""

    def __init__(self, raw: dict, prefix: str):
        self.raw, self.prefix = raw, prefix
        self.total, self.taken = len(raw), 0  # for the load's progress
        self.out: dict[str, torch.Tensor] = {}
        self.names: dict[str, str] = {}  # ours -> the file's, for messages
        self.missing: list[str] = []

    def take(self, key: str) -> torch.Tensor | None:
        name = self.prefix + key
        t = self.raw.pop(name, None)
        if t is None:
            self.missing.append(name)
            return None
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{name} is {describe_value(t)}, not a tensor")
        load_watch.tensor_done(load_watch.READING, self.taken, self.total)  # stops here once cancelled
        self.taken += 1
        return t

    def put(self, ours: str, *keys: str, dim: int = 0) -> None:
        """ours = the file's `keys`, stacked along `dim` when there are several (fused q/k/v, gate/up)."""
        parts = [self.take(k) for k in keys]
        if any(p is None for p in parts):
            return
        self.names[ours] = "+".join(self.prefix + k for k in keys)
        floating = all(p.is_floating_point() for p in parts)
        try:
            if len(parts) == 1:
                self.out[ours] = parts[0].to(torch.float32) if floating else parts[0]
            elif floating:  # converted as they are stacked: no float32 copy of each part first
                self.out[ours] = _stacked_float32(parts, dim)
            else:
                self.out[ours] = torch.cat(parts, dim=dim)
        except RuntimeError:
            shapes = ", ".join(str(tuple(p.shape)) for p in parts)
            raise CheckpointError(f"{self.names[ours]} have shapes {shapes} that do not stack; the weights do not "
                                  "match config.json") from None

    def put_optional(self, ours: str, key: str) -> None:
        if self.prefix + key in self.raw:
            self.put(ours, key)

    def drop(self, *suffixes: str) -> None:
        """Forget buffers some files carry (causal masks, rotary tables): we compute them."""
        for name in [k for k in self.raw if k.endswith(suffixes)]:
            del self.raw[name]


def _stacked_float32(parts: list[torch.Tensor], dim: int) -> torch.Tensor:
    """torch.cat(parts, dim) in float32, each part converted as it is copied into its slice:
    cat itself converts element by element when the dtypes differ, slower than a converting
    copy, which a large bfloat16 model's load feels. Parts that do not stack raise
    cat's RuntimeError."""
    shape = torch.cat([torch.empty(p.shape, device="meta") for p in parts], dim=dim).shape
    out = torch.empty(shape, dtype=torch.float32)
    start = 0
    for p in parts:
        out.narrow(dim, start, p.shape[dim]).copy_(p)
        start += p.shape[dim]
    return out
