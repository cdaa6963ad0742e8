"""The normalisations a block can use, chosen by `config.norm`.

LayerNorm (GPT-2, NeoX, GPT-J), RMSNorm (Llama, Qwen, Mistral, Gemma, OLMo 2, Phi-3), and
LayerNorm without weight or bias (OLMo). Gemma stores its RMSNorm weight as an offset from one:
`norm_offset` applies it as (1 + w).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_viewer.model.decoder.config import GPTConfig


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w, in float32 whatever the input dtype (as every family does)."""

    def __init__(self, dim: int, eps: float, offset: bool = False):
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(torch.ones(dim) if not offset else torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        w = (1.0 + self.weight.float()) if self.offset else self.weight
        return (h * w).to(x.dtype)


class PlainLayerNorm(nn.Module):
    """LayerNorm with no learned parameters."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.dim,), None, None, self.eps)


def make_norm(config: GPTConfig, dim: int | None = None) -> nn.Module:
    dim = config.n_embd if dim is None else dim
    if config.norm == "rmsnorm":
        return RMSNorm(dim, config.layer_norm_eps, offset=config.norm_offset)
    if config.norm == "layernorm_plain":
        return PlainLayerNorm(dim, config.layer_norm_eps)
    return nn.LayerNorm(dim, eps=config.layer_norm_eps, bias=config.bias)


class FlatRMSNorm(RMSNorm):
    """RMSNorm over all heads of a (B, T, n, hs) projection at once (OLMo 2's QK-norm)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.flatten(2)).view_as(x)  # (B, T, n * hs) -> (B, T, n, hs)
