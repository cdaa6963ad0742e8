"""Progress and cancellation of a forward, at layer boundaries.

A long forward (a capture of thousands of tokens, a prediction from an early layer) reports each
layer as it starts and stops at the next one once its caller cancels: readers on each block's
`hook_resid_pre`, registered with the forward's other hooks, so the decoder knows nothing of it.
A cancelled forward raises `Cancelled` out of the model; the hooks are removed as it unwinds.
"""

from __future__ import annotations

from transformer_viewer.model.errors import Cancelled


def layer_watch(start: int, n_layer: int, progress=None, is_cancelled=None) -> list:
    """Readers at each layer's entry from `start`: report `progress(layer, n_layer)` and raise
    `Cancelled` once `is_cancelled()` is true (the hooks are removed as the forward unwinds)."""
    if progress is None and is_cancelled is None:
        return []

    def at(layer: int):
        def check(_resid) -> None:
            if is_cancelled is not None and is_cancelled():
                raise Cancelled
            if progress is not None:
                progress(layer, n_layer)
        return check

    return [(f"blocks.{layer}.hook_resid_pre", at(layer)) for layer in range(start, n_layer)]
