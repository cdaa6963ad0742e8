"""What a capture of T tokens keeps in memory, and the budget that refuses one too large for it
before anything is allocated (`TV_MEMORY_BUDGET_MB` in the app); the attention a capture may
compute on the CPU; and what head scoring holds, checked against the same budget."""

from __future__ import annotations

import numpy as np

from transformer_viewer.model.capture.overview import n_cells
from transformer_viewer.model.errors import CaptureTooLargeError
from transformer_viewer.model.kernels.attention_kernels import LARGEST_BLOCK

DEFAULT_MEMORY_BUDGET = 4 << 30  # bytes of captured arrays one trace may hold
KEPT_RUNS = 3  # runs whose residual streams stay cached for recomputation (clean, masked, one more)
# Attention scores (one head's query against one key it sees) a capture may compute on the CPU.
# The memory budget bounds what a trace keeps, not the work: a config that claims 2^20 positions
# holds a 32k-token prompt of a small model in under 1 GiB and then computes for minutes. The
# bound is SmolLM2-135M's shape (30 layers x 9 heads) at 8,192 tokens, 40-50 s on one CPU core.
MAX_CPU_ATTENTION_SCORES = 30 * 9 * 8192 * 8193 // 2


def capture_bytes(config, T: int, pattern_dtype, n_vocab: int, keep_full: bool) -> int:
    """Bytes a capture of T tokens keeps: the trace's arrays, the cached residual streams of
    the runs kept for recomputation, and the largest block of pattern rows held at once."""
    L, nh, C = config.n_layer, config.n_head, config.n_embd
    item = np.dtype(pattern_dtype).itemsize
    n = n_cells(T)
    trace = (2 * L * nh * n * n * item  # overviews
             + L * config.n_mlp * (4 + 8 + 4)  # MLP summaries
             + (L * nh + 2 * L + 2 + 1) * T * 4 + T * 8  # head and residual norms, log-probs, ids
             + n_vocab * 4)  # next-token distribution
    if keep_full:
        trace += L * nh * T * T * item + L * T * config.n_mlp * item
    resid = KEPT_RUNS * (L + 1) * T * C * 4
    rows = nh * LARGEST_BLOCK * T * 4 * 2  # one block of pattern rows and its softmax input
    qk = 2 * T * C * 4  # one layer's queries and keys, kept while its tiles are asked for
    return trace + resid + rows + qk


def attention_scores(config, T: int) -> int:
    """Attention scores a causal forward of T tokens computes: every head of every layer, each
    query against itself and the keys before it (a sliding layer, against its window only)."""
    total = 0
    full = T * (T + 1) // 2
    for layer in range(config.n_layer):
        w = config.sliding_window if config.layer_is_sliding(layer) else 0
        total += (w * T - w * (w - 1) // 2 if 0 < w < T else full) * config.n_head
    return total


def check_cpu_work(config, T: int, limit: int | None = None) -> None:
    """Refuse a capture of T tokens whose attention alone is over `limit` scores (default:
    MAX_CPU_ATTENTION_SCORES), saying what fits."""
    limit = MAX_CPU_ATTENTION_SCORES if limit is None else limit
    need = attention_scores(config, T)
    if need <= limit:
        return
    fits = max_tokens(lambda t: attention_scores(config, t), limit, config.block_size)
    raise CaptureTooLargeError(f"capturing {T:,} tokens computes {need / 1e9:.1f} billion attention scores on this "
                               f"model's {config.n_layer} layers x {config.n_head} heads, more than the "
                               f"{limit / 1e9:.1f} billion a capture on the CPU may; shorten the prompt to "
                               f"{fits:,} tokens or fewer (or run on a GPU)")


def max_tokens(estimate, budget: int, block_size: int) -> int:
    """The longest prompt whose `estimate(T)` fits `budget` (0: not even one token)."""
    if estimate(1) > budget:
        return 0
    lo, hi = 1, block_size
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if estimate(mid) <= budget else (lo, mid - 1)
    return lo


def check_budget(estimate, budget: int, block_size: int, T: int) -> None:
    """Refuse a capture of T tokens whose `estimate(T)` is over `budget`, saying what fits."""
    if estimate(T) <= budget:
        return
    fits = max_tokens(estimate, budget, block_size)
    advice = (f"shorten the prompt to {fits} tokens or fewer" if fits else
              "not even one token fits; raise the memory budget")
    raise CaptureTooLargeError(f"capturing {T} tokens needs about {size_text(estimate(T))}, over the "
                               f"{size_text(budget)} budget; {advice}")


# -- head scores (model/analysis/heads.py): every layer's full pattern of each forward, held at once
def scoring_bytes(config, T: int, batch: int = 1) -> int:
    """Bytes scoring `batch` sequences of T tokens holds at once: every layer's pattern (float32,
    kept by the hook until the forward ends), plus, for one layer at a time, the forward's scores
    and the scorers' float64 copies and temporaries (about six arrays of that layer's size)."""
    per_layer = int(batch) * config.n_head * T * T
    return config.n_layer * per_layer * 4 + per_layer * 48


def check_scoring_budget(config, budget: int, T: int, batch: int, what: str, advice) -> None:
    """Refuse, before any forward, scoring that would hold more than `budget` bytes;
    `advice(fits)` says how to fit it, given the longest T that does."""
    need = scoring_bytes(config, T, batch)
    if need <= budget:
        return
    fits = max_tokens(lambda t: scoring_bytes(config, t, batch), budget, config.block_size)
    raise CaptureTooLargeError(f"scoring heads on {what} needs about {size_text(need)}, over the "
                               f"{size_text(budget)} memory budget; {advice(fits)}")


def size_text(n: int) -> str:
    """Bytes in the unit that reads best: a small budget is not "0 MiB"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


# -- activation patching (model/capture/patched_runs.py)
MAX_PATCH_BATCH = 64  # patched runs in one forward at most: larger batches gain little on a CPU


def patch_site_bytes(config, site: str, T: int) -> int:
    """Bytes one prompt's run keeps as the source of patches of `site` (model/capture/
    interventions.py's PATCH_SITES; "resid_pre": the residual stream every run keeps), float32."""
    L, C, hs = config.n_layer, config.n_embd, config.head_size
    per_position = {"resid_pre": (L + 1) * C, "embed": 2 * C, "attn_out": L * C, "mlp_out": L * C,
                    "z": L * config.n_head * hs, "q": L * config.n_head * hs, "k": L * config.kv_heads * hs,
                    "v": L * config.kv_heads * hs, "pattern": L * config.n_head * T}[site]
    return per_position * T * 4


def patch_sources_bytes(config, T: int, sites) -> int:
    """Bytes one prompt's run keeps for patches of `sites`, its residual stream included."""
    return sum(patch_site_bytes(config, site, T) for site in {"resid_pre", *sites})


def patched_run_bytes(config, T: int) -> int:
    """Bytes one patched run of T tokens holds at once, for one layer: its residual stream and
    the layer's queries, keys, values and outputs, the MLP's hidden activations, and a whole
    attention pattern with its scores (a pattern patch builds it)."""
    C, hs = config.n_embd, config.head_size
    return 4 * T * (6 * C + 3 * config.n_head * hs + 2 * config.n_mlp + 2 * config.n_head * T)


def patch_batch_size(config, T: int, budget: int) -> int:
    """Patched runs of T tokens one forward may batch within a quarter of `budget` (the rest
    holds the traces and the patch sources), at least 1, at most MAX_PATCH_BATCH."""
    return max(1, min(MAX_PATCH_BATCH, (budget // 4) // max(1, patched_run_bytes(config, T))))
