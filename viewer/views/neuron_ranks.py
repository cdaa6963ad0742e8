"""Which MLP neurons to show, in what order, from a layer's (T, n_mlp) activations: the MLP
view's arithmetic, kept apart from its widgets. Every function reads the activations a block
or a few columns at a time: a layer of 8k tokens x 16k neurons is half a gigabyte."""

from __future__ import annotations

import numpy as np

SORTS = {"max": "max activation", "token": "activation on the selected token", "index": "neuron index"}
TOP_K = 12


def neuron_order(acts: np.ndarray, sort: str, query: int, clean: np.ndarray | None = None,
                 peak: np.ndarray | None = None) -> np.ndarray:
    """Neuron indices in display order from (T, n_mlp) activations (minus `clean`: by |change|);
    `peak` (n_mlp,) is the per-neuron key of the "max" sort when it is already known (the
    trace's summary, or the largest |change|). Ties keep index order (stable sort)."""
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; use one of {', '.join(SORTS)}")
    if sort == "index":
        return np.arange(acts.shape[1])
    if sort == "token":
        values = acts[query].astype(np.float32)
        if clean is not None:
            values = np.abs(values - clean[query].astype(np.float32))
    elif peak is not None:
        values = peak
    else:
        values = largest_change(acts, clean) if clean is not None else acts.max(axis=0)
    return np.argsort(-values, kind="stable")


def largest_change(acts: np.ndarray, clean: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """(n_mlp,) max over tokens of |acts - clean|, a block of tokens at a time (no (T, n_mlp)
    temporary: 8k tokens x 16k neurons would be half a gigabyte)."""
    out = np.zeros(acts.shape[1], dtype=np.float32)
    for a in range(0, acts.shape[0], chunk):
        d = np.abs(acts[a:a + chunk].astype(np.float32) - clean[a:a + chunk].astype(np.float32))
        np.maximum(out, d.max(axis=0), out=out)
    return out


def neuron_rows(acts: np.ndarray, order: np.ndarray, clean: np.ndarray | None = None) -> np.ndarray:
    """(len(order), T) float32: the ordered neurons' activations (or masked - clean) over the tokens."""
    m = acts[:, order].astype(np.float32).T  # (T, k) -> (k, T)
    if clean is not None:
        m = m - clean[:, order].astype(np.float32).T
    return np.ascontiguousarray(m)


def top_neurons(acts: np.ndarray, query: int, k: int = TOP_K, clean: np.ndarray | None = None) -> list[tuple[int, float]]:
    """The k neurons with the largest activation (|change| against `clean`) on token `query`."""
    col = acts[query].astype(np.float32)
    if clean is not None:
        col = col - clean[query].astype(np.float32)
    order = np.argsort(-(np.abs(col) if clean is not None else col), kind="stable")[:k]
    return [(int(n), float(col[n])) for n in order]
