"""Headless core of transformer-viewer: the decoder, checkpoints, tokenizer and capture.

Nothing here imports Qt; everything works in tests, scripts and notebooks.
"""

from transformer_viewer.model.config import GPTConfig
from transformer_viewer.model.errors import CheckpointError, ModelError

__all__ = ["GPTConfig", "CheckpointError", "ModelError"]
