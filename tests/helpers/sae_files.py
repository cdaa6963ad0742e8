"""Reading a SAELens 6 folder in the tests, and its encoder and decoder written from SAELens's
formulas (standard: ReLU; TopK: the k largest pre-activations, ReLU'd), independently of the
code that trained and wrote it."""

from __future__ import annotations

import json
import os

import torch
from safetensors.torch import load_file


def read_folder(folder) -> tuple[dict, dict[str, torch.Tensor]]:
    """(cfg.json, the weights as float32) of an SAE folder."""
    with open(os.path.join(folder, "cfg.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    weights = {name: t.float() for name, t in load_file(os.path.join(folder, "sae_weights.safetensors")).items()}
    return cfg, weights


def encode(cfg: dict, w: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    sae_in = x - w["b_dec"] if cfg["apply_b_dec_to_input"] else x
    pre = sae_in @ w["W_enc"] + w["b_enc"]  # (N, d_sae)
    if cfg["architecture"] == "standard":
        return torch.relu(pre)
    values, indices = pre.topk(cfg["k"], dim=-1)
    return torch.zeros_like(pre).scatter(-1, indices, values.relu())


def decode(w: dict[str, torch.Tensor], f: torch.Tensor) -> torch.Tensor:
    return f @ w["W_dec"] + w["b_dec"]  # (N, d_in)


def fvu(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Fraction of variance unexplained, in float64."""
    x, x_hat = x.double(), x_hat.double()
    return float((x - x_hat).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
