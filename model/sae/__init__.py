"""Sparse autoencoders read from disk beside the model: their config, the module, the readers
and feature labels. The entry points load on first use, so importing the room imports no torch.
The analyses of a prompt's features take a Session and live in model/analysis/sae_features.py."""

from __future__ import annotations

import importlib

_ENTRY_POINTS = {
    "SaeConfig": "transformer_viewer.model.sae.config",
    "SparseAutoencoder": "transformer_viewer.model.sae.module",
    "LoadedSae": "transformer_viewer.model.sae.loading",
    "load_sae": "transformer_viewer.model.sae.loading",
    "parse_sae_spec": "transformer_viewer.model.sae.sources",
    "read_feature_labels": "transformer_viewer.model.sae.labels",
}

__all__ = list(_ENTRY_POINTS)


def __getattr__(name: str):
    module = _ENTRY_POINTS.get(name)
    if module is None:
        raise AttributeError(f"module 'transformer_viewer.model.sae' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
