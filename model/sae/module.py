"""The sparse autoencoder as a torch module, with SAELens's arithmetic for each architecture.

encode: x (..., d_in) -> the input normalisation (none, constant_norm_rescale, layer_norm), less
b_dec when `apply_b_dec_to_input`, then the architecture's activation of `x @ W_enc + b_enc`:
ReLU (standard); ReLU where the pre-activation exceeds `threshold` (jumprelu); the k largest
pre-activations, ReLU'd, after multiplying each by its decoder row's norm when
`rescale_acts_by_decoder_norm` (topk); a gate `x @ W_enc + b_gate > 0` times the magnitude
ReLU(x @ (W_enc * exp(r_mag)) + b_mag) (gated).
decode: a (..., d_sae) -> a @ W_dec + b_dec (activations divided by the decoder norms first
under the topk rescaling), then the input normalisation undone with the statistics of the
activation that was encoded (`Stats`), as SAELens's `forward` does.

The module computes in float32 whatever the model's dtype; callers cast.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from transformer_viewer.model.sae.config import SaeConfig

LAYER_NORM_EPS = 1e-5  # SAELens's run-time layer_norm eps


class Stats(NamedTuple):
    """Per-token statistics of an encoded activation that decoding needs to undo its
    normalisation: `mean` and `scale` (..., 1), out = y * scale + mean; None where nothing is undone."""

    mean: torch.Tensor | None
    scale: torch.Tensor | None


NO_STATS = Stats(None, None)


def _params(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=torch.float32), requires_grad=False)


class SparseAutoencoder(nn.Module):
    """W_enc (d_in, d_sae), W_dec (d_sae, d_in), b_enc (d_sae), b_dec (d_in); `threshold` (d_sae)
    for jumprelu; `b_gate`, `r_mag`, `b_mag` (d_sae) for gated, which has no b_enc.
    Made empty here; model/sae/loading.py fills the parameters from a checked file."""

    def __init__(self, config: SaeConfig):
        super().__init__()
        self.config = config
        d_in, d_sae = config.d_in, config.d_sae
        self.W_enc = _params(d_in, d_sae)
        self.W_dec = _params(d_sae, d_in)
        self.b_dec = _params(d_in)
        if config.architecture == "gated":
            self.b_gate, self.r_mag, self.b_mag = _params(d_sae), _params(d_sae), _params(d_sae)
        else:
            self.b_enc = _params(d_sae)
        if config.architecture == "jumprelu":
            self.threshold = _params(d_sae)

    # -- normalisation --------------------------------------------------------------------
    def normalize(self, x: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        """x in the units the SAE was trained on, and what undoes it."""
        kind = self.config.normalize_activations
        if kind == "constant_norm_rescale":
            scale = x.norm(dim=-1, keepdim=True) / (self.config.d_in ** 0.5)  # (..., 1) = 1 / SAELens's coefficient
            return x / scale, Stats(None, scale)
        if kind == "layer_norm":
            mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
            centred = x - mean
            std = centred.std(dim=-1, keepdim=True)  # unbiased, as torch.std and SAELens
            return centred / (std + LAYER_NORM_EPS), Stats(mean, std)
        return x, NO_STATS  # none; expected_average_only_in was folded into the weights at load

    @staticmethod
    def denormalize(y: torch.Tensor, stats: Stats, shift: bool = True) -> torch.Tensor:
        """Undo `normalize` on a reconstruction; `shift=False` for a difference of two."""
        if stats.scale is not None:
            y = y * stats.scale
        if shift and stats.mean is not None:
            y = y + stats.mean
        return y

    # -- encode ---------------------------------------------------------------------------
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) -> (..., d_sae) feature activations."""
        return self.encode_with_stats(x)[0]

    def encode_with_stats(self, x: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        """The features of x and the statistics `decode` needs to return to x's units."""
        x, stats = self.normalize(x.float())
        if self.config.apply_b_dec_to_input:
            x = x - self.b_dec
        arch = self.config.architecture
        if arch == "gated":
            active = (x @ self.W_enc + self.b_gate) > 0
            magnitude = torch.relu(x @ (self.W_enc * self.r_mag.exp()) + self.b_mag)
            return magnitude * active, stats
        pre = self._pre_activations(x)  # (..., d_sae)
        if arch == "standard":
            return pre.relu_(), stats
        if arch == "jumprelu":
            return torch.relu(pre) * (pre > self.threshold), stats
        top = torch.topk(pre, self.config.k, dim=-1, sorted=False)
        return torch.zeros_like(pre).scatter_(-1, top.indices, top.values.relu()), stats

    def _pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """x @ W_enc + b_enc (times the decoder norms under the topk rescaling), (..., d_sae): the
        bias added inside the product (one pass over the widest array, not two)."""
        flat = x.reshape(-1, x.shape[-1])  # (N, d_in)
        pre = torch.addmm(self.b_enc, flat, self.W_enc).view(*x.shape[:-1], self.config.d_sae)
        if self.config.architecture == "topk" and self.config.rescale_acts_by_decoder_norm:
            pre = pre * self.W_dec.norm(dim=-1)
        return pre

    def top_features(self, x: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, ids), each (..., top), highest first: the `top` largest of `encode(x)`, with
        ids of zero activations arbitrary. Standard and TopK never make the dense (..., d_sae)
        activations: ReLU keeps the order, so the top of the pre-activations, ReLU'd, is the top
        of the features, and a TopK SAE's top k already holds every nonzero one."""
        arch = self.config.architecture
        if arch not in ("standard", "topk"):
            return torch.topk(self.encode(x), top, dim=-1)
        x, _stats = self.normalize(x.float())
        if self.config.apply_b_dec_to_input:
            x = x - self.b_dec
        pre = self._pre_activations(x)
        values, ids = torch.topk(pre, min(top, self.config.k) if arch == "topk" else top, dim=-1)
        values = values.relu_()
        if values.shape[-1] < top:  # a TopK SAE asked for more than its k: the rest are zeros
            pad = top - values.shape[-1]
            values = torch.cat([values, values.new_zeros(*values.shape[:-1], pad)], dim=-1)
            ids = torch.cat([ids, ids.new_zeros(*ids.shape[:-1], pad)], dim=-1)
        return values, ids

    # -- decode ---------------------------------------------------------------------------
    def _to_input_space(self, a: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        w = self.W_dec if features is None else self.W_dec[features]  # (d_sae or n, d_in)
        if self.config.rescale_acts_by_decoder_norm:
            a = a / w.norm(dim=-1)
        return a @ w  # (..., d_in)

    def decode(self, a: torch.Tensor, stats: Stats = NO_STATS) -> torch.Tensor:
        """(..., d_sae) -> (..., d_in): the reconstruction, in the input's units when `stats` are
        those `encode_with_stats` returned (without them, in the SAE's normalised units)."""
        return self.denormalize(self._to_input_space(a.float()) + self.b_dec, stats)

    def decode_difference(self, a_new: torch.Tensor, a_old: torch.Tensor, stats: Stats = NO_STATS,
                          features: torch.Tensor | None = None) -> torch.Tensor:
        """decode(a_new) - decode(a_old), computed as the decoder applied to a_new - a_old: exactly
        zero in every row where the two agree, so an unclamped token is left bit for bit. With
        `features`, the activations are of those features alone (the others agree)."""
        return self.denormalize(self._to_input_space(a_new.float() - a_old.float(), features), stats, shift=False)

    def decoder_norms(self) -> torch.Tensor:
        """(d_sae,) each feature's decoder row norm, in the SAE's units."""
        norms = self.W_dec.norm(dim=-1)
        return torch.ones_like(norms) if self.config.rescale_acts_by_decoder_norm else norms

    # -- a few features ---------------------------------------------------------------------
    def encode_features(self, x: torch.Tensor, features: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        """(..., len(features)) the activations of `features` alone (a clamp needs no others):
        from their encoder columns alone where a feature's activation depends on nothing else
        (standard, jumprelu, gated); a TopK SAE ranks every feature first."""
        if self.config.architecture == "topk":
            a, stats = self.encode_with_stats(x)
            return a[..., features], stats
        x, stats = self.normalize(x.float())
        if self.config.apply_b_dec_to_input:
            x = x - self.b_dec
        w = self.W_enc[:, features]  # (d_in, n)
        if self.config.architecture == "gated":
            active = (x @ w + self.b_gate[features]) > 0
            return torch.relu(x @ (w * self.r_mag[features].exp()) + self.b_mag[features]) * active, stats
        pre = x @ w + self.b_enc[features]
        if self.config.architecture == "jumprelu":
            return torch.relu(pre) * (pre > self.threshold[features]), stats
        return torch.relu(pre), stats
