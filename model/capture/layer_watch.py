"""Progress and cancellation of a forward, at layer boundaries and inside attention.

A long forward (a capture of thousands of tokens, a prediction from an early layer) reports each
layer as it starts and stops soon after its caller cancels: readers on each block's
`hook_resid_pre` and `hook_resid_mid`, registered with the forward's other hooks, so the decoder
knows nothing of it; and, since one layer's attention over 8,192 tokens takes a second,
`attention_watch` checks again at each block of query rows the attention computes. A cancelled
forward raises `Cancelled` out of the model; the hooks are removed as it unwinds.
"""

from __future__ import annotations

from transformer_viewer.model.errors import stop_if_cancelled


def layer_watch(start: int, n_layer: int, progress=None, is_cancelled=None) -> list:
    """Readers at each layer's entry from `start`: report `progress(layer, n_layer)` and raise
    `Cancelled` once `is_cancelled()` is true (the hooks are removed as the forward unwinds)."""
    if progress is None and is_cancelled is None:
        return []

    def at(layer: int):
        def check(_resid) -> None:
            stop_if_cancelled(is_cancelled)
            if progress is not None:
                progress(layer, n_layer)
        return check

    out = [(f"blocks.{layer}.hook_resid_pre", at(layer)) for layer in range(start, n_layer)]
    return out + [(f"blocks.{layer}.hook_resid_mid", lambda _resid: stop_if_cancelled(is_cancelled))
                  for layer in range(start, n_layer)]


def attention_watch(layers, is_cancelled=None, observers: dict | None = None) -> dict:
    """Pattern-row observers by layer (for `InstalledInference.observing`) that raise `Cancelled` at
    the next block of query rows once `is_cancelled()` is true, then pass the rows on to
    `observers[layer]` where there is one."""
    observers = observers or {}
    if is_cancelled is None:
        return observers

    def watch(then):
        def observe(first_row: int, rows) -> None:
            stop_if_cancelled(is_cancelled)
            if then is not None:
                then(first_row, rows)
        return observe

    return {layer: watch(observers.get(layer)) for layer in layers}
