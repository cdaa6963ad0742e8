"""Model configuration, with nanoGPT's field names.

The defaults are GPT-2: pre-LayerNorm blocks, learned positions, a plain GELU MLP. The other
fields are the switches the decoder families need (rotary positions, RMSNorm, grouped-query
attention, gated MLPs, parallel blocks, ...); each names one small piece of `gpt.py`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field

ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "silu")
POSITIONALS = ("learned", "sinusoidal", "rotary", "none")
NORMS = ("layernorm", "rmsnorm", "layernorm_plain")  # plain: no weight, no bias (OLMo)
NORM_PLACEMENTS = ("pre", "sandwich", "post")  # sandwich: pre and post (Gemma 2/3); post only (OLMo 2)
ROTARY_STYLES = ("neox", "gptj")  # half-split pairs (NeoX, Llama) or interleaved pairs (GPT-J)
ROPE_SCALINGS = ("none", "linear", "llama3", "yarn", "longrope", "dynamic")
QK_NORMS = ("none", "head", "all")  # per head (Qwen3, Gemma 3) or over the whole projection (OLMo 2)
MLPS = ("plain", "gated")
BLOCKS = ("sequential", "parallel", "parallel_shared_norm")
LAYER_TYPES = ("full", "sliding")

# Architecture presets for training: config fields a family fixes (the sizes stay free).
PRESETS = {
    "gpt2": {},
    "llama": {"positional": "rotary", "norm": "rmsnorm", "mlp": "gated", "activation": "silu", "bias": False},
}


def float32_problem(value: float) -> str | None:
    """Why a finite number cannot be used as float32 (None when it can): zero, or a magnitude
    between float32's smallest normal value and its largest."""
    magnitude = abs(value)
    if magnitude == 0 or FLOAT32_TINY <= magnitude <= FLOAT32_MAX:
        return None
    if magnitude < FLOAT32_TINY:
        return f"{value:g} underflows float32 (its smallest normal value is {FLOAT32_TINY:.8g})"
    return f"{value:g} overflows float32 (its largest value is {FLOAT32_MAX:.8g})"


def gated_mlp_width(n_embd: int) -> int:
    """Llama's hidden size for a gated MLP: 8/3 n_embd (the plain MLP's parameter count), up to a multiple of 32."""
    return -(-8 * n_embd // (3 * 32)) * 32


# A hard ceiling so a hostile config cannot make us allocate a 10^9-row position table.
MAX_BLOCK_SIZE = 1 << 20
MAX_LEARNED_POSITIONS = 1 << 16  # learned/sinusoidal tables are allocated; rotary needs no table
MAX_VOCAB_SIZE = 1 << 20
MAX_WIDTH = 1 << 15
# The float32 range: every config number ends up in float32 arithmetic (the weights' dtype), where
# a non-zero value below the smallest normal float32 becomes 0 or loses its precision (a
# divisor of 1e-300 is a division by zero) and one above the largest becomes infinity.
FLOAT32_TINY = 2.0 ** -126  # 1.1754944e-38
FLOAT32_MAX = (2.0 - 2.0 ** -23) * 2.0 ** 127  # 3.4028235e38
# Fields held as tuples (a frozen config stays hashable) that JSON carries as lists.
TUPLE_FIELDS = ("layer_types", "rope_short_factor", "rope_long_factor", "nope_layers")


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 256
    vocab_size: int = 50257
    n_layer: int = 4
    n_head: int = 8
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True  # biases in linear layers and LayerNorms (nanoGPT)
    activation: str = "gelu_tanh"
    positional: str = "learned"
    tie_embeddings: bool = True
    layer_norm_eps: float = 1e-5  # the eps of every norm, LayerNorm or RMSNorm
    n_mlp: int = 0  # 0 means 4 * n_embd, filled in by __post_init__
    # Norms
    norm: str = "layernorm"
    norm_offset: bool = False  # norm weight applied as (1 + w) (Gemma)
    norm_placement: str = "pre"
    # Attention
    n_kv_head: int = 0  # key/value heads (grouped-query attention); 0 means n_head
    head_dim: int = 0  # 0 means n_embd // n_head
    qkv_bias: bool | None = None  # None: as `bias`
    proj_bias: bool | None = None  # attention output projection; None: as `bias`
    qk_norm: str = "none"
    attn_scale: float = 0.0  # softmax scale; 0 means 1/sqrt(head size)
    attn_softcap: float = 0.0  # cap * tanh(score / cap) before the softmax; 0 is off
    sliding_window: int = 0  # keys a query sees on sliding layers (itself included); 0 is off
    layer_types: tuple = ()  # "full"/"sliding" per layer; empty: all sliding when sliding_window > 0
    # Rotary positions (positional="rotary")
    rotary_style: str = "neox"
    rotary_pct: float = 1.0  # fraction of each head's dimensions that rotate
    rope_base: float = 10000.0
    rope_local_base: float = 0.0  # base of sliding layers, unscaled (Gemma 3); 0: as full layers
    rope_scaling: str = "none"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0  # llama3
    rope_high_freq_factor: float = 4.0  # llama3
    rope_original_context: int = 0  # llama3, yarn, longrope; dynamic: the length past which the base grows
    rope_beta_fast: float = 32.0  # yarn
    rope_beta_slow: float = 1.0  # yarn
    rope_attention_factor: float = 1.0  # yarn and longrope: cos and sin are multiplied by it
    rope_truncate: bool = True  # yarn
    # longrope (Phi-3): each frequency divided by its own factor, one set for prompts of up to
    # rope_original_context tokens and one for longer prompts
    rope_short_factor: tuple = ()
    rope_long_factor: tuple = ()
    nope_layers: tuple = ()  # layers whose queries and keys are not rotated at all (SmolLM3's NoPE layers)
    # MLP, block, embeddings and head
    mlp: str = "plain"
    mlp_bias: bool | None = None  # None: as `bias`
    block: str = "sequential"
    embed_scale: bool = False  # token embedding times sqrt(n_embd) (Gemma)
    logit_softcap: float = 0.0  # cap * tanh(logit / cap) on the final logits; 0 is off
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.n_mlp == 0:
            object.__setattr__(self, "n_mlp", 4 * self.n_embd)
        for name in TUPLE_FIELDS:
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        self.validate()

    @property
    def head_size(self) -> int:
        return self.head_dim or self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def rotary_dim(self) -> int:
        """Dimensions of each head that rotate (0 without rotary positions)."""
        return int(self.head_size * self.rotary_pct) if self.positional == "rotary" else 0

    def uses_bias(self, part: str) -> bool:
        """Bias of "qkv", "proj" or "mlp": its own field, else `bias`."""
        own = getattr(self, f"{part}_bias")
        return self.bias if own is None else own

    def layer_is_sliding(self, layer: int) -> bool:
        if not self.sliding_window:
            return False
        return not self.layer_types or self.layer_types[layer] == "sliding"

    def validate(self) -> None:
        """Raise ValueError with one line naming the first bad field."""
        ints = {
            "block_size": (self.block_size, 1, MAX_BLOCK_SIZE),
            "vocab_size": (self.vocab_size, 1, MAX_VOCAB_SIZE),
            "n_layer": (self.n_layer, 1, 1024),
            "n_head": (self.n_head, 1, 4096),
            "n_embd": (self.n_embd, 1, MAX_WIDTH),
            "n_mlp": (self.n_mlp, 1, 8 * MAX_WIDTH),
            "n_kv_head": (self.n_kv_head, 0, 4096),
            "head_dim": (self.head_dim, 0, 4096),
            "sliding_window": (self.sliding_window, 0, MAX_BLOCK_SIZE),
            "rope_original_context": (self.rope_original_context, 0, MAX_BLOCK_SIZE),
        }
        for name, (value, floor, ceiling) in ints.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"config field {name} must be an integer, got {value!r}")
            if value < floor:
                raise ValueError(f"config field {name} must be {'positive' if floor else 'zero or more'}, got {value}")
            if value > ceiling:
                raise ValueError(f"config field {name}={value} is larger than the supported {ceiling}")
        floats = {  # name: (value, lowest, highest, lowest allowed itself)
            "dropout": (self.dropout, 0.0, 1.0, True),
            "layer_norm_eps": (self.layer_norm_eps, 0.0, 1.0, False),
            "attn_scale": (self.attn_scale, 0.0, 1e4, True),
            "attn_softcap": (self.attn_softcap, 0.0, 1e6, True),
            "logit_softcap": (self.logit_softcap, 0.0, 1e6, True),
            "rotary_pct": (self.rotary_pct, 0.0, 1.0, False),
            "rope_base": (self.rope_base, 1.0, 1e12, False),
            "rope_local_base": (self.rope_local_base, 0.0, 1e12, True),
            "rope_factor": (self.rope_factor, 0.0, 1e6, False),
            "rope_low_freq_factor": (self.rope_low_freq_factor, 0.0, 1e6, False),
            "rope_high_freq_factor": (self.rope_high_freq_factor, 0.0, 1e6, False),
            "rope_beta_fast": (self.rope_beta_fast, 0.0, 1e6, False),
            "rope_beta_slow": (self.rope_beta_slow, 0.0, 1e6, False),
            "rope_attention_factor": (self.rope_attention_factor, 0.0, 1e3, False),
        }
        for name, (value, low, high, low_ok) in floats.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"config field {name} must be a finite number, got {value!r}")
            if not ((low <= value if low_ok else low < value) and value <= high):
                left = "[" if low_ok else "("
                raise ValueError(f"config field {name} must be in {left}{low:g}, {high:g}], got {value}")
            problem = float32_problem(value)
            if problem:
                raise ValueError(f"config field {name}: {problem}")
        if self.dropout >= 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        for name in ("bias", "tie_embeddings", "norm_offset", "embed_scale", "rope_truncate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"config field {name} must be true or false, got {getattr(self, name)!r}")
        for name in ("qkv_bias", "proj_bias", "mlp_bias"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise ValueError(f"config field {name} must be true, false or null, got {getattr(self, name)!r}")
        choices = {
            "activation": ACTIVATIONS, "positional": POSITIONALS, "norm": NORMS, "norm_placement": NORM_PLACEMENTS,
            "rotary_style": ROTARY_STYLES, "rope_scaling": ROPE_SCALINGS, "qk_norm": QK_NORMS, "mlp": MLPS,
            "block": BLOCKS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        self._validate_shapes()

    def _validate_shapes(self) -> None:
        if not self.head_dim and self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}; set head_dim")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_head={self.n_head} is not a multiple of n_kv_head={self.n_kv_head}")
        if self.n_head * self.head_size > 8 * MAX_WIDTH:
            raise ValueError(f"n_head * head_dim = {self.n_head * self.head_size} is larger than the supported "
                             f"{8 * MAX_WIDTH}")
        if self.positional in ("learned", "sinusoidal") and self.block_size > MAX_LEARNED_POSITIONS:
            raise ValueError(f"config field block_size={self.block_size} is larger than the supported "
                             f"{MAX_LEARNED_POSITIONS} for {self.positional} positions")
        if self.positional == "rotary" and (self.rotary_dim < 2 or self.rotary_dim % 2):
            raise ValueError(f"rotary_pct={self.rotary_pct} of head size {self.head_size} gives {self.rotary_dim} "
                             "rotating dimensions; it must be a positive even number")
        if self.rope_scaling in ("llama3", "yarn", "longrope", "dynamic") and not self.rope_original_context:
            raise ValueError(f"rope_scaling {self.rope_scaling!r} needs rope_original_context")
        if self.rope_scaling == "dynamic" and self.rotary_dim < 4:  # its exponent is dim / (dim - 2)
            raise ValueError(f"dynamic rope scaling needs 4 or more rotating dimensions per head, got {self.rotary_dim}")
        self._validate_rope_factors()
        if self.rope_scaling == "llama3" and self.rope_high_freq_factor <= self.rope_low_freq_factor:
            raise ValueError("rope_high_freq_factor must be larger than rope_low_freq_factor")
        if not isinstance(self.layer_types, tuple):
            raise ValueError(f"config field layer_types must be a list, got {self.layer_types!r}")
        if self.layer_types:
            if len(self.layer_types) != self.n_layer:
                raise ValueError(f"layer_types has {len(self.layer_types)} entries for {self.n_layer} layers")
            bad = [t for t in self.layer_types if t not in LAYER_TYPES]
            if bad:
                raise ValueError(f"layer_types entries must be one of {', '.join(LAYER_TYPES)}, got {bad[0]!r}")
        if not isinstance(self.nope_layers, tuple) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.n_layer for i in self.nope_layers):
            raise ValueError(f"config field nope_layers must list layer indices below {self.n_layer}, got "
                             f"{self.nope_layers!r:.80}")
        if self.norm_placement == "post" and self.block != "sequential":
            raise ValueError("norm_placement 'post' needs block 'sequential'")

    def _validate_rope_factors(self) -> None:
        """longrope's two lists: one positive finite number per rotating pair of dimensions."""
        pairs = self.rotary_dim // 2
        for name in ("rope_short_factor", "rope_long_factor"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or len(value) > 4096 or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
                    and float32_problem(x) is None for x in value):
                raise ValueError(f"config field {name} must be a list of positive numbers within float32's range, "
                                 f"got {value!r:.80}")
            if self.rope_scaling == "longrope" and len(value) != pairs:
                raise ValueError(f"config field {name} has {len(value)} entries for the {pairs} rotating pairs of "
                                 "dimensions of each head")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for name in TUPLE_FIELDS:
            d[name] = list(getattr(self, name))
        if not d["extra"]:
            d.pop("extra")
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        """Build from a dict, ignoring unknown keys (kept in `extra`)."""
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in names and k != "extra"}
        unknown = {k: v for k, v in d.items() if k not in names}
        extra = dict(d.get("extra") or {}, **unknown)
        return cls(**known, extra=extra)

    def replace(self, **changes) -> GPTConfig:
        return dataclasses.replace(self, **changes)
