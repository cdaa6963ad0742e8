"""Model configuration, with nanoGPT's field names."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

ACTIVATIONS = ("gelu_tanh", "gelu", "relu")
POSITIONALS = ("learned", "sinusoidal")

# A hard ceiling so a hostile config cannot make us allocate a 10^9-row position table.
MAX_BLOCK_SIZE = 1 << 16
MAX_VOCAB_SIZE = 1 << 20
MAX_WIDTH = 1 << 15


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 256
    vocab_size: int = 50257
    n_layer: int = 4
    n_head: int = 8
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    activation: str = "gelu_tanh"
    positional: str = "learned"
    tie_embeddings: bool = True
    layer_norm_eps: float = 1e-5
    n_mlp: int = 0  # 0 means 4 * n_embd, filled in by __post_init__
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.n_mlp == 0:
            object.__setattr__(self, "n_mlp", 4 * self.n_embd)
        self.validate()

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def validate(self) -> None:
        """Raise ValueError with one line naming the first bad field."""
        ints = {
            "block_size": (self.block_size, MAX_BLOCK_SIZE),
            "vocab_size": (self.vocab_size, MAX_VOCAB_SIZE),
            "n_layer": (self.n_layer, 1024),
            "n_head": (self.n_head, 4096),
            "n_embd": (self.n_embd, MAX_WIDTH),
            "n_mlp": (self.n_mlp, 8 * MAX_WIDTH),
        }
        for name, (value, ceiling) in ints.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"config field {name} must be an integer, got {value!r}")
            if value <= 0:
                raise ValueError(f"config field {name} must be positive, got {value}")
            if value > ceiling:
                raise ValueError(f"config field {name}={value} is larger than the supported {ceiling}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        if self.positional not in POSITIONALS:
            raise ValueError(f"positional must be one of {', '.join(POSITIONALS)}, got {self.positional!r}")
        if not (0.0 <= float(self.dropout) < 1.0):
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not (0.0 < float(self.layer_norm_eps) < 1.0):
            raise ValueError(f"layer_norm_eps must be in (0, 1), got {self.layer_norm_eps}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
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
