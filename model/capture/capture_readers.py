"""What a capture writes into the trace as the forward passes: the arrays of a new trace, and
the readers hooked to activations that fill them layer by layer (residual norms, per-head
output norms, MLP summaries, pooled attention overviews, and with `keep_full` the whole
patterns and activations).

Each reader reduces its activation at once and keeps nothing of it, so a capture holds
O(T) per layer; model/capture/session.py registers them for one forward.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch

from transformer_viewer.model.capture import host_arrays
from transformer_viewer.model.capture.overview import OverviewPooler, PoolScratch, cell_size
from transformer_viewer.model.kernels.linear import weight_fingerprint

COLUMN_BLOCK = 256  # rows column_max compares with the maximum at once


def trace_arrays(config, T: int, n: int, start: int, pattern_dtype, keep_full: bool, prev) -> dict[str, np.ndarray]:
    """The arrays of a new trace by field name (n: overview cells per side), holding the
    previous trace's values for the layers before `start` (the rest are written by the run)."""
    L, nh = config.n_layer, config.n_head
    overview_max = host_arrays.empty((L, nh, n, n), pattern_dtype)
    arrays = {
        "overview_max": overview_max,
        # One token per cell: the mean of a cell is its max, one array serves as both.
        "overview_mean": host_arrays.empty((L, nh, n, n), pattern_dtype) if cell_size(T) > 1 else overview_max,
        "mlp_max": host_arrays.empty((L, config.n_mlp), np.float32),
        "mlp_argmax": host_arrays.empty((L, config.n_mlp), np.int64),
        "mlp_mean": host_arrays.empty((L, config.n_mlp), np.float32),
        "head_norms": host_arrays.empty((L, nh, T), np.float32),
    }
    if keep_full:
        arrays["attention"] = host_arrays.empty((L, nh, T, T), pattern_dtype)
        arrays["mlp_post"] = host_arrays.empty((L, T, config.n_mlp), pattern_dtype)
    norms = host_arrays.empty((2 * L + 2, T), np.float32)
    if start > 0 and prev is not None:
        # Copies, never shared: the previous trace may still be on screen.
        for name, dest in arrays.items():
            dest[:start] = getattr(prev, name)[:start]
        rows = 2 * L + 2 if start >= L else 1 + 2 * start
        norms[:rows] = prev.resid_norms[:rows]
    arrays["resid_norms"] = norms
    return arrays


def overview_poolers(n_head: int, T: int, layers, device, arrays: dict[str, np.ndarray], keep_full: bool) -> dict:
    """One OverviewPooler per layer run, by layer; none when the full patterns are kept and a
    cell is one token (the trace then shares the patterns as the overview, no copy)."""
    if keep_full and cell_size(T) == 1:
        return {}
    scratch = PoolScratch()  # the layers run one after another: one buffer serves them all
    mean_name = "overview_max" if cell_size(T) == 1 else "overview_mean"  # one token: the mean is the max
    return {layer: OverviewPooler(n_head, T, device, out=arrays["overview_max"][layer], scratch=scratch,
                                  mean_out=arrays[mean_name][layer])
            for layer in layers}


def finish_overviews(poolers: dict, arrays: dict[str, np.ndarray], T: int, keep_full: bool) -> None:
    """Write each pooler's overview into the trace's arrays. With one token per cell the mean
    is the max: one array serves as both (the pattern itself, when kept)."""
    one_token_cells = cell_size(T) == 1
    mean_name = "overview_max" if one_token_cells else "overview_mean"
    for layer, pooler in poolers.items():
        pooler.finish(arrays["overview_max"][layer], arrays[mean_name][layer])
    if one_token_cells:
        shared = arrays["attention"] if keep_full else arrays["overview_max"]
        arrays["overview_max"] = arrays["overview_mean"] = shared


def readers(model, arrays: dict[str, np.ndarray], start: int, factors: HeadFactors, keep_full: bool,
            poolers: dict) -> list[tuple[str, object]]:
    """(hook point, reader) pairs that write layers start.. of a run into the trace's arrays;
    with `keep_full`, the whole patterns also feed the layers' overview `poolers`."""
    norms = arrays["resid_norms"]
    L = len(model.blocks)
    out = [("hook_embed", partial(store_norm, norms[0]))] if start == 0 else []
    for layer in range(start, L):
        b = f"blocks.{layer}"
        out += [
            (f"{b}.hook_resid_pre", partial(store_norm, norms[1 + 2 * layer])),
            (f"{b}.hook_resid_mid", partial(store_norm, norms[2 + 2 * layer])),
            (f"{b}.attn.hook_z", partial(store_head_norms, factors.get(model, layer), arrays["head_norms"][layer])),
            (f"{b}.mlp.hook_post", partial(summarize_mlp, layer, arrays)),
        ]
        if keep_full:
            out += [
                (f"{b}.attn.hook_pattern", partial(store, arrays["attention"][layer])),
                (f"{b}.mlp.hook_post", partial(store, arrays["mlp_post"][layer])),
            ]
            if layer in poolers:
                out.append((f"{b}.attn.hook_pattern", partial(poolers[layer], 0)))
    out.append((f"blocks.{L - 1}.hook_resid_post", partial(store_norm, norms[2 * L + 1])))
    return out


def store(dest: np.ndarray, activation: torch.Tensor) -> None:
    """Batch row 0 straight into the trace's array, converted in one pass with no temporary."""
    torch.from_numpy(dest).copy_(activation[0])


def reduce_into(dest: torch.Tensor, reduce, x: torch.Tensor) -> None:
    """dest = reduce(x): straight into the trace's array where x is a float32 CPU tensor (no
    temporary), else computed where x lives and copied."""
    if x.dtype == torch.float32 and x.device.type == "cpu":
        reduce(x, out=dest)
    else:
        dest.copy_(reduce(x))


def store_norm(dest: np.ndarray, resid: torch.Tensor) -> None:
    reduce_into(torch.from_numpy(dest), partial(torch.linalg.vector_norm, dim=-1), resid[0].float())


def summarize_mlp(layer: int, arrays: dict[str, np.ndarray], post: torch.Tensor) -> None:
    """Each neuron's max over the tokens, the token where it is reached, and its mean."""
    x = post[0]  # (T, n_mlp)
    reduce_into(torch.from_numpy(arrays["mlp_mean"][layer]), partial(torch.mean, dim=0), x)
    column_max(x, torch.from_numpy(arrays["mlp_max"][layer]), torch.from_numpy(arrays["mlp_argmax"][layer]))


def column_max(x: torch.Tensor, values: torch.Tensor | None = None,
               indices: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.max(dim=0)` of a (T, n) tensor: (n,) values and (n,) first indices of the maximum,
    written into `values` and `indices` (CPU tensors, any float and integer dtype) when given.

    torch's max with indices is several times slower on the CPU than the two passes below,
    whatever the layout, and a capture runs it over every layer. The maximum alone (`amax`) is
    vectorized; the first row reaching it is then the smallest of
    sign(max - x) * T + row, a float minimum that is vectorized too.
    max - x is exactly 0 only where x equals the maximum (IEEE subtraction), so ties name the
    first row as `max` does. A column whose maximum is not finite (NaN wins in `max`, and
    inf - inf is NaN) takes torch's own path, as do other devices and dtypes.
    """
    T, n = x.shape
    if x.device.type != "cpu" or x.dtype != torch.float32 or T >= 2 ** 23:
        return _into(*x.max(dim=0), values, indices)
    m = torch.amax(x, dim=0, out=values) if values is not None and values.dtype == torch.float32 else x.amax(dim=0)
    # One reduction and one wait instead of isfinite, all and bool: the sum of the maxima is
    # finite when each is (a finite sum too large for float32 only sends it the slow way).
    if not math.isfinite(float(m.sum())):
        return _into(*x.max(dim=0), values, indices)
    rows = torch.arange(T, dtype=torch.float32)[:, None]  # (T, 1), exact below 2**24
    key = torch.empty(min(COLUMN_BLOCK, T), n)  # one block of rows, reused: it stays in cache
    first = torch.empty(n)
    for a in range(0, T, COLUMN_BLOCK):
        block = x[a:a + COLUMN_BLOCK]
        k = key[: block.shape[0]]
        torch.sub(m, block, out=k)  # >= 0, and 0 exactly where the row holds the maximum
        torch.add(rows[a:a + COLUMN_BLOCK], k.sign_(), alpha=T, out=k)  # the row's index there, >= T elsewhere
        if a == 0:
            torch.amin(k, dim=0, out=first)
        else:
            torch.minimum(first, k.amin(dim=0), out=first)
    return _into(m, first, values, indices)


def _into(m: torch.Tensor, first: torch.Tensor, values: torch.Tensor | None, indices: torch.Tensor | None):
    if values is not None and values.data_ptr() != m.data_ptr():
        values.copy_(m)
    if indices is not None:
        indices.copy_(first)  # whole numbers below 2**24: exact in any integer dtype
    return (m if values is None else values), (first.long() if indices is None else indices)


def store_head_norms(factor: torch.Tensor, dest: np.ndarray, z: torch.Tensor) -> None:
    """The L2 norm of each head's write to the residual, ||z_h W_h|| = ||z_h F_h|| with
    F_h F_h^T = W_h W_h^T (`HeadFactors`): T*nh*hs^2 work instead of T*nh*hs*C, no (nh, T, C)
    temporary, and two passes (a product, a norm). factor (nh, hs, hs), dest (nh, T)."""
    # Heads first: the attention computed z as (nh, T, hs) and hook_z sees it transposed, so
    # this is that tensor again, and each head's product is one plain matrix product.
    zh = z[0].transpose(0, 1).to(factor.dtype)  # (nh, T, hs)
    reduce_into(torch.from_numpy(dest), partial(torch.linalg.vector_norm, dim=-1), torch.bmm(zh, factor))


class HeadFactors:
    """Per layer, (nh, hs, hs) factors F_h of each head's slice W_h of c_proj, F_h F_h^T =
    W_h W_h^T, cached while the weight is unchanged (`weight_fingerprint`).

    F_h is the Cholesky factor of the Gram matrix G_h = W_h W_h^T: one batched float32 product,
    factored in float64, several times cheaper than a float64 QR of W_h^T, which made the
    first capture of a large model wait seconds. A head whose slice has rank
    below its size (pruned, or zeroed) has no Cholesky factor; QR gives it one (W_h^T = Q_h R_h,
    so W_h W_h^T = R_h^T R_h and F_h = R_h^T, exactly zero for a zeroed head). A norm of z_h F_h
    is never negative and needs no square root of a rounded quadratic form."""

    def __init__(self):
        self._factors: dict[int, tuple[tuple, torch.Tensor]] = {}

    def get(self, model, layer: int) -> torch.Tensor:
        attn = model.blocks[layer].attn
        nh, hs = attn.n_head, attn.head_size
        w_o = attn.c_proj.weight  # (C, nh * hs): out = z_flat @ w_o.T
        key = weight_fingerprint(w_o)
        cached = self._factors.get(layer)
        if cached is not None and cached[0] == key:
            return cached[1]
        w_heads = w_o.detach().float().T.reshape(nh, hs, w_o.shape[0])  # (nh, hs, C)
        gram = torch.bmm(w_heads, w_heads.transpose(1, 2)).double().cpu()  # (nh, hs, hs)
        factor, info = torch.linalg.cholesky_ex(gram)  # lower triangular, F F^T = G where info is 0
        singular = info != 0
        if bool(singular.any()):
            r = torch.linalg.qr(w_heads[singular.to(w_heads.device)].double().transpose(1, 2).cpu(), mode="r").R
            factor[singular] = r.transpose(1, 2)  # (k, hs, hs)
        factor = factor.to(device=w_o.device, dtype=torch.float32)
        self._factors[layer] = (key, factor)
        return factor
