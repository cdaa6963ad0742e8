"""Headless core of transformer-viewer: the decoder, checkpoints, tokenizers, capture and analyses.

Nothing here imports Qt; everything works in tests, scripts and notebooks. The rooms, each a
subpackage, from the bottom up (each imports only rooms below it; tests/model/test_layers.py
checks it):

- `files/`: every file read or written, as untrusted input (regular files only, bounded reads,
  JSON with bounds, whole-or-nothing writes);
- `decoder/`: the readable model, one plain path (config, gpt.py, norms, rotary, hook points,
  families);
- `kernels/`: the speed paths (blocked attention, the fused MLP, packed GEMMs, logits by
  vocabulary blocks) and `inference.py`, which a Session uses to install them on its model;
- `tokenizers/`: GPT-2's and a folder's tokenizer.json, and the checks on their files;
- `checkpoints/`: opening and writing checkpoints, one reader per format (`formats/`);
- `sae/`: sparse autoencoders read beside the model (SAELens folders, Gemma Scope npz);
- `capture/` and `training/`: a prompt's runs and what they keep (Session, Trace,
  interventions, the memory budget); training a small model;
- `analysis/`: what takes a Session (lens, scans, head scores, diffs, direct logit attribution,
  routes, rollout, generation, an SAE's features).

`errors.py`, `device.py` and `rust_calls.py` serve every room. Scripts import the stable entry
points from here (`from transformer_viewer.model import load_checkpoint, Session`), which stay
put whatever moves between rooms; they load on first use, so importing the package for its
errors does not import torch.
"""

from __future__ import annotations

import importlib

from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import CheckpointError, ModelError

# name -> module that defines it, imported on first access
_ENTRY_POINTS = {
    "GPT": "transformer_viewer.model.decoder.gpt",
    "HookPoint": "transformer_viewer.model.decoder.hooks",
    "hooks": "transformer_viewer.model.decoder.hooks",
    "reading": "transformer_viewer.model.decoder.hooks",
    "caching": "transformer_viewer.model.decoder.hooks",
    "run_with_cache": "transformer_viewer.model.decoder.hooks",
    "hook_points": "transformer_viewer.model.decoder.hooks",
    "LoadedModel": "transformer_viewer.model.checkpoints.checkpoint",
    "load_checkpoint": "transformer_viewer.model.checkpoints.checkpoint",
    "save_checkpoint": "transformer_viewer.model.checkpoints.checkpoint",
    "load_tokenizer": "transformer_viewer.model.tokenizers.tokenizer_loading",
    "Session": "transformer_viewer.model.capture.session",
    "Intervention": "transformer_viewer.model.capture.interventions",
    "Trace": "transformer_viewer.model.capture.trace",
    "head_pattern": "transformer_viewer.model.capture.on_demand",
    "logit_lens": "transformer_viewer.model.analysis.lens",
    "head_scan": "transformer_viewer.model.analysis.scan",
    "detect_heads": "transformer_viewer.model.analysis.heads",
    "head_attribution": "transformer_viewer.model.analysis.attribution",
    "logit_attribution": "transformer_viewer.model.analysis.logit_attribution",
    "information_routes": "transformer_viewer.model.analysis.routes",
    "rollout_rows": "transformer_viewer.model.analysis.rollout",
    "FeatureClamp": "transformer_viewer.model.capture.interventions",
    "load_sae": "transformer_viewer.model.sae.loading",
    "token_features": "transformer_viewer.model.analysis.sae_features",
    "feature_row": "transformer_viewer.model.analysis.sae_features",
    "feature_logit_effect": "transformer_viewer.model.analysis.sae_features",
    "reconstruction_share": "transformer_viewer.model.analysis.sae_features",
    "sae_overview": "transformer_viewer.model.analysis.sae_features",
}

__all__ = ["GPTConfig", "CheckpointError", "ModelError", *_ENTRY_POINTS]


def __getattr__(name: str):
    module = _ENTRY_POINTS.get(name)
    if module is None:
        raise AttributeError(f"module 'transformer_viewer.model' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value
