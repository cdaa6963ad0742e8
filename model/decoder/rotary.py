"""Rotary position embeddings: the frequencies of each scaling and the two pair layouts.

Each head's first `rotary_dim` dimensions rotate by an angle proportional to the position;
the rest pass through (partial rotary: Pythia, Phi). Pairs are (i, i + d/2) in the NeoX
layout (Llama and most families) and (2i, 2i + 1) in GPT-J's. The frequencies follow
Hugging Face's `modeling_rope_utils` operation for operation, so the angles agree to the bit.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_viewer.model.decoder.config import GPTConfig


def inverse_frequencies(config: GPTConfig, base: float, scaling: str, T: int = 0) -> tuple[torch.Tensor, float]:
    """(rotary_dim / 2,) float32 inverse frequencies and the factor cos/sin are multiplied by,
    for a T-token prompt (longrope's and dynamic scaling's depend on its length)."""
    dim = config.rotary_dim
    if scaling == "dynamic":
        base = _dynamic_base(config, base, T)
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float) / dim  # (dim/2,)
    pos_freqs = base ** exponents  # (dim/2,) base^(2i/dim): one over each pair's unscaled frequency
    inv_freq = 1.0 / pos_freqs
    if scaling == "longrope":
        long = uses_long_factors(config, scaling, T)
        factors = torch.tensor(config.rope_long_factor if long else config.rope_short_factor, dtype=torch.float32)
        return 1.0 / (factors * pos_freqs), config.rope_attention_factor
    if scaling == "linear":
        return inv_freq / config.rope_factor, 1.0
    if scaling == "llama3":
        return _llama3(inv_freq, config), 1.0
    if scaling == "yarn":
        return _yarn(pos_freqs, dim, base, config), config.rope_attention_factor
    return inv_freq, 1.0


def _llama3(inv_freq: torch.Tensor, c: GPTConfig) -> torch.Tensor:
    """Llama 3.1's: long wavelengths slowed by `factor`, short ones kept, a smooth ramp between."""
    old = c.rope_original_context
    low_wavelen, high_wavelen = old / c.rope_low_freq_factor, old / c.rope_high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / c.rope_factor, inv_freq)
    smooth = (old / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor)
    smoothed = (1 - smooth) * scaled / c.rope_factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def _yarn(pos_freqs: torch.Tensor, dim: int, base: float, c: GPTConfig) -> torch.Tensor:
    """YaRN: interpolate the slow dimensions, extrapolate the fast ones, a linear ramp between."""

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(c.rope_original_context / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(c.rope_beta_fast), correction_dim(c.rope_beta_slow)
    if c.rope_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # (dim/2,)
    extrapolation = 1 - ramp
    return (1.0 / (c.rope_factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


def _dynamic_base(c: GPTConfig, base: float, T: int) -> float | torch.Tensor:
    """Dynamic NTK scaling's base: past the original context it grows with the prompt's length,
    base * (factor * T / original - (factor - 1)) ** (dim / (dim - 2)); within it, it is the
    base itself. As Hugging Face computes it, bit for bit: a Python float at the original
    context (its frequencies at load), a float32 tensor for a longer prompt (its forward passes
    the length as a tensor). Hugging Face keeps the grown frequencies for later, shorter prompts
    that still exceed the original context; here every prompt has its own, as its first forward."""
    dim, old, factor = c.rotary_dim, c.rope_original_context, c.rope_factor
    length = torch.tensor(T) if T > old else old  # int64, as torch.max(position_ids) + 1
    return base * ((factor * length / old) - (factor - 1)) ** (dim / (dim - 2))


def frequencies_key(config: GPTConfig, scaling: str, T: int) -> str:
    """Which frequencies a T-token prompt rotates by: "" for the usual ones, "long" for
    longrope's long set, the length itself for a prompt past dynamic scaling's original context."""
    if uses_long_factors(config, scaling, T):
        return "long"
    return f"length {T}" if scaling == "dynamic" and T > config.rope_original_context else ""


def uses_long_factors(config: GPTConfig, scaling: str, T: int) -> bool:
    """longrope rotates a whole prompt by its long factors once it is longer than the original
    context, every position included (as Hugging Face does), so the angles depend on T."""
    return scaling == "longrope" and T > config.rope_original_context


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """NeoX layout: (x1, x2) -> (-x2, x1) over the two halves of the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """GPT-J layout: each pair (a, b) of neighbours -> (-b, a)."""
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


class Rotary(nn.Module):
    """Rotates q and k, (B, T, nh, hs), by position. No parameters and no buffers: the
    cos/sin table is computed on first use per device and grown as prompts grow."""

    def __init__(self, config: GPTConfig, base: float, scaling: str):
        super().__init__()
        self.config = config
        self.dim = config.rotary_dim
        self.base, self.scaling = base, scaling
        self.rotate = rotate_pairs if config.rotary_style == "gptj" else rotate_half
        self._tables: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def table(self, T: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of a T-token prompt, each (T, rotary_dim), float32."""
        variant = frequencies_key(self.config, self.scaling, T)
        key = f"{device}, {variant}"
        cached = self._tables.get(key)
        if cached is None or cached[0].shape[0] < T:
            if len(self._tables) >= 8:  # dynamic scaling has a table per length: keep a few
                self._tables.clear()
            with torch.inference_mode(False):  # usable by a later training step too
                inv_freq, factor = inverse_frequencies(self.config, self.base, self.scaling, T)
                n = max(T, 256)
                freqs = torch.arange(n, dtype=torch.float32)[:, None] * inv_freq  # (n, dim/2)
                if self.config.rotary_style == "gptj":
                    angles = torch.repeat_interleave(freqs, 2, dim=-1)  # (n, dim), pairs side by side
                else:
                    angles = torch.cat((freqs, freqs), dim=-1)  # (n, dim), halves
                cached = ((angles.cos() * factor).to(device), (angles.sin() * factor).to(device))
            self._tables[key] = cached
        return cached[0][:T], cached[1][:T]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        cos, sin = self.table(T, x.device)
        cos = cos[None, :, None, :].to(x.dtype)  # (1, T, 1, rot)
        sin = sin[None, :, None, :].to(x.dtype)  # (1, T, 1, rot)
        if self.dim == x.shape[-1]:
            return x * cos + self.rotate(x) * sin
        rot, rest = x[..., : self.dim], x[..., self.dim :]
        return torch.cat((rot * cos + self.rotate(rot) * sin, rest), dim=-1)
