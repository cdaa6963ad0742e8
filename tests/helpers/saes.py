"""Random SAEs written to disk as SAELens (both cfg.json layouts) and Gemma Scope write them."""

from __future__ import annotations

import json
import os

import numpy as np
import torch
from safetensors.torch import save_file


def random_weights(architecture: str, d_in: int, d_sae: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Weights at scales where every architecture's choices matter: some features fire, some do
    not, thresholds and gates cut some off."""
    rng = np.random.default_rng(seed)
    w = {
        "W_enc": rng.standard_normal((d_in, d_sae)) / np.sqrt(d_in),
        "W_dec": rng.standard_normal((d_sae, d_in)) * rng.uniform(0.2, 2.0, (d_sae, 1)) / np.sqrt(d_sae),
        "b_dec": 0.1 * rng.standard_normal(d_in),
    }
    if architecture == "gated":
        w.update(b_gate=0.2 * rng.standard_normal(d_sae), r_mag=0.3 * rng.standard_normal(d_sae),
                 b_mag=0.2 * rng.standard_normal(d_sae))
    else:
        w["b_enc"] = 0.2 * rng.standard_normal(d_sae)
    if architecture == "jumprelu":
        w["threshold"] = rng.uniform(0.0, 0.6, d_sae)
    return {k: v.astype(np.float32) for k, v in w.items()}


def saelens_cfg(architecture: str, d_in: int, d_sae: int, hook: str, layout: str = "6", k: int | None = None,
                **fields) -> dict:
    """A cfg.json as SAELens 6 (`layout="6"`) or an SAELens before 6 (`"5"`) writes it."""
    if layout == "6":
        metadata = {"hook_name": hook, "model_name": fields.pop("model_name", "tiny"),
                    "context_size": fields.pop("context_size", 128), "sae_lens_version": "6.5.1",
                    "model_class_name": "HookedTransformer"}
        for key in ("model_from_pretrained_kwargs", "hook_head_index"):
            if key in fields:
                metadata[key] = fields.pop(key)
        cfg = {"architecture": architecture, "d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cpu",
               "apply_b_dec_to_input": True, "normalize_activations": "none", "reshape_activations": "none",
               "metadata": metadata}
        if architecture == "topk":
            cfg.update(k=k, rescale_acts_by_decoder_norm=False)
    else:
        cfg = {"d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cpu", "hook_point": hook,
               "hook_point_layer": 0, "model_name": fields.pop("model_name", "tiny"),
               "context_size": fields.pop("context_size", 128), "apply_b_dec_to_input": True,
               "normalize_activations": False, "sae_lens_version": "3.12.0", "activation_fn_str": "relu"}
        if architecture == "topk":
            cfg.update(activation_fn_str="topk", activation_fn_kwargs={"k": k})
        else:
            cfg["architecture"] = architecture
    cfg.update(fields)
    return cfg


def write_saelens(folder, cfg: dict, weights: dict[str, np.ndarray]) -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        json.dump(cfg, f)
    save_file({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in weights.items()},
              os.path.join(folder, "sae_weights.safetensors"))
    return str(folder)


def write_npz(path, weights: dict[str, np.ndarray]) -> str:
    """A Gemma Scope params.npz (np.savez: uncompressed .npy members)."""
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, **weights)
    return str(path)


def attach_random_sae(session, folder, hook: str, d_sae: int = 64, seed: int = 0) -> tuple[int, dict]:
    """A random standard SAE at `hook` of the session's model, attached: its index and its
    weights as torch tensors (for `standard_clamp_hook`)."""
    from transformer_viewer.model.sae.loading import load_sae

    d_in = session.config.n_embd
    w = random_weights("standard", d_in, d_sae, seed=seed)
    path = write_saelens(os.path.join(str(folder), f"sae{seed}"), saelens_cfg("standard", d_in, d_sae, hook), w)
    return session.attach_sae(load_sae(path, session.config)), {k: torch.from_numpy(v) for k, v in w.items()}


def standard_clamp_hook(w: dict, clamps, seen: dict | None = None):
    """A clamp of a standard SAE (`w` as torch tensors) written out: x + (a' - a) W_dec with a
    the SAE's features of x and a' those the clamps set or scaled (positions are the prompt's).
    `seen`, when given, keeps the activation before ("in") and after ("out") the clamp."""
    def hook(_m, _i, x):
        flat = x.float().reshape(*x.shape[:2], -1)  # (B, T, d_in): hook_z's heads concatenated
        a = torch.relu((flat - w["b_dec"]) @ w["W_enc"] + w["b_enc"])  # (B, T, d_sae)
        a2 = a.clone()
        for c in clamps:
            rows = slice(None) if c.position is None else c.position
            a2[:, rows, c.feature] = c.value if c.kind == "set" else a2[:, rows, c.feature] * c.value
        out = x + ((a2 - a) @ w["W_dec"]).view(x.shape).to(x.dtype)
        if seen is not None:
            seen["in"], seen["out"] = x, out
        return out
    return hook
