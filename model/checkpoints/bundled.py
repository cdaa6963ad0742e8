"""Where the bundled model is installed. No torch here: the GUI thread asks whether the loaded
model is the bundled one (the example prompts name its heads)."""

from __future__ import annotations

import os
from importlib import resources

BUNDLED_NAME = "bundled.safetensors"


def bundled_checkpoint_path() -> str:
    return str(resources.files("transformer_viewer.assets").joinpath(BUNDLED_NAME))


def is_bundled(source: str | None) -> bool:
    """Is `source` (a loaded model's path) the bundled model?"""
    return bool(source) and os.path.realpath(source) == os.path.realpath(bundled_checkpoint_path())


BUNDLED_SAE_FOLDER = "bundled_sae"  # a SAELens folder: an SAE of the bundled model, and its labels


def bundled_sae_path() -> str:
    """The folder of the SAE that ships for the bundled model (assets/SAE.md)."""
    return str(resources.files("transformer_viewer.assets").joinpath(BUNDLED_SAE_FOLDER))
