"""The speed paths of attention, which `inference.BlockedAttention` runs in place of the decoder's plain attention.

Without autograd, the (T, T) scores are computed by blocks of queries, skipping the keys a
block can never see, optionally into one reusable workspace. Every path here computes the plain
masked product of the decoder's `attention_pattern`: the same bits on most kernels, within float32 rounding
where a GEMM sums a block of rows in another order than the whole matrix
(tests/model/kernels/test_fast_paths.py). Where nobody reads the whole pattern, `attend_by_blocks`
never holds more than one block of query rows: memory O(block x T) per head instead of O(T^2),
what makes long prompts fit. Either way each block of rows meets the values of its visible keys
only (`values_by_blocks`). `pattern_rows` is the one computation of a block of rows, on every
no-grad path alike; a tile recomputed later (model/capture/on_demand.py) calls it with the same blocks
and a batch of heads, so it equals what the forward had, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

# Query rows per block of the no-grad attention. 128 rows keep a block's (nh, 128, T) scores
# small enough for the cache at long prompts and make the products tall enough to run near the
# GEMM's speed: against 64 rows, long captures run faster; 256 rows are no faster.
QUERY_BLOCK = 128
LARGEST_BLOCK = QUERY_BLOCK + QUERY_BLOCK // 2  # rows a block may have: a short tail joins the one before

# Masks by (T, window, device), shared by every layer: building a (T, T) mask per layer per
# forward cost more than the masked_fill that uses it at T = 1024.
_MASKS: dict[tuple[int, int, str], torch.Tensor] = {}


def blocked_keys(T: int, window: int, device) -> torch.Tensor:
    """(T, T) bool, True where a query may not see a key: the future, and with a sliding
    window (0: none) the keys `window` or more positions back."""
    key = (T, window, str(device))
    mask = _MASKS.get(key)
    if mask is None:
        # A normal tensor even when first asked for under inference_mode, so a later training
        # step can still use it.
        with torch.inference_mode(False):
            mask = torch.ones(T, T, dtype=torch.bool, device=device).triu_(1)
            if window:
                mask |= torch.ones(T, T, dtype=torch.bool, device=device).tril_(-window)
        if len(_MASKS) >= 16:
            _MASKS.clear()
        _MASKS[key] = mask
    return mask


def future_mask(T: int, device) -> torch.Tensor:
    """(T, T) bool, True above the diagonal (the keys a query may not see)."""
    return blocked_keys(T, 0, device)


_FUTURE_BIASES: dict[tuple[int, str], torch.Tensor] = {}


def hide_future_(square: torch.Tensor) -> torch.Tensor:
    """Scores (..., n, n) of n queries against the same n keys, with -inf above the diagonal.

    In float32 by adding a cached (n, n) bias of -0.0 and -inf: a finite score plus -inf is
    -inf and plus -0.0 itself (a +0 too: +0 + -0 is +0), so the bits are masked_fill's, and
    the add runs several times faster than masked_fill's broadcast bool mask on the CPU. Other dtypes keep masked_fill, where a
    half-precision score that overflowed to +inf would turn into NaN when added to.
    """
    n = square.shape[-1]
    if square.dtype != torch.float32:
        return square.masked_fill_(future_mask(n, square.device), float("-inf"))
    key = (n, str(square.device))
    bias = _FUTURE_BIASES.get(key)
    if bias is None:
        with torch.inference_mode(False):
            bias = torch.full((n, n), -0.0, device=square.device)
            bias.masked_fill_(future_mask(n, square.device), float("-inf"))
        if len(_FUTURE_BIASES) >= 16:
            _FUTURE_BIASES.clear()
        _FUTURE_BIASES[key] = bias
    return square.add_(bias)


def softcap_(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(scores / cap) in place (Gemma 2's attention-logit soft-capping); 0 is off."""
    if cap:
        scores.div_(cap).tanh_().mul_(cap)
    return scores


class AttentionWorkspace:
    """One reusable block of memory for the (B, nh, T, T) attention scores of every layer.

    A fresh 50 MB tensor per layer (T = 1024) costs more in page faults than the product that
    fills it. Only valid while nothing keeps a layer's pattern past its hook (the session copies
    it out at once) and nothing records for autograd: `InstalledInference.scratch_patterns` lends it.
    """

    def __init__(self):
        self._flat: torch.Tensor | None = None
        # The (B, nh, T, T) shape whose view of the buffer is known to hold zeros above the
        # diagonal (a causal pattern never writes there), so the next layer can skip zeroing.
        self.zero_above_diagonal: tuple[int, ...] | None = None

    def scores(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        n = math.prod(shape)
        f = self._flat
        if f is None or f.numel() < n or f.dtype != like.dtype or f.device != like.device:
            self._flat = f = torch.empty(n, dtype=like.dtype, device=like.device)
            self.zero_above_diagonal = None
        return f[:n].view(shape)


def query_blocks(T: int) -> list[tuple[int, int]]:
    """The (first, end) query rows of each block the no-grad attention computes at once.

    A few-row tail joins the block before it: it would get a matrix-vector kernel that sums in
    another order, and every path (capture, prediction, a tile recomputed later) must round alike.
    """
    starts = list(range(0, T, QUERY_BLOCK))
    if len(starts) > 1 and T - starts[-1] < QUERY_BLOCK // 2:
        starts.pop()
    return list(zip(starts, starts[1:] + [T], strict=True))


def window_blocked_keys(a: int, b: int, window: int, device) -> torch.Tensor:
    """(b - a, b) bool: rows a..b-1 of `blocked_keys(b, window)`, built for these rows alone
    (a (b, b) mask per block would cost more than the block's scores at long prompts)."""
    rows = torch.arange(a, b, device=device)[:, None]  # (b - a, 1)
    keys = torch.arange(b, device=device)[None, :]  # (1, b)
    return (keys > rows) | (keys <= rows - window)


def pattern_rows(qh: torch.Tensor, kh: torch.Tensor, a: int, b: int, window: int, cap: float,
                 out: torch.Tensor | None = None, scores: torch.Tensor | None = None) -> torch.Tensor:
    """Query rows a..b-1 of the pattern against keys 0..b-1 (the later ones are all future):
    (B, nh, b - a, b), into `out` when given. `scores`, a contiguous (B, nh, b - a, b) tensor,
    holds the scores before the softmax; it may be `out` itself (the softmax then runs in place).

    Reused buffers matter more than they seem: a fresh tensor of a block's scores is a megabyte
    or more per head at long prompts, which the allocator takes from the system and the first
    write page-faults in, every block, costing more than the product that fills it.
    """
    key_t = kh[:, :, :b].transpose(-2, -1)
    if scores is None:
        scores = qh[:, :, a:b] @ key_t  # (B, nh, b - a, b)
    else:
        torch.matmul(qh[:, :, a:b], key_t, out=scores)  # the same kernel, no allocation
    softcap_(scores, cap)
    if window and b > window:  # else no key of these rows is window or more back (Phi-3.5's 262,144 never is)
        scores.masked_fill_(window_blocked_keys(a, b, window, qh.device), float("-inf"))
    else:  # only the diagonal square holds future keys; the columns before a are all visible
        # The square is the same for every block of b - a rows: one cached mask, whatever a is.
        hide_future_(scores[..., a:b])
    return torch.softmax(scores, dim=-1) if out is None else torch.softmax(scores, dim=-1, out=out)


def blocked_pattern(qh: torch.Tensor, kh: torch.Tensor, window: int, cap: float,
                    ws: AttentionWorkspace | None) -> torch.Tensor:
    """`attention_pattern` by blocks of queries, skipping the keys a block cannot see.

    Half the (T, T) products and softmax work at long prompts, and the result of the full
    masked product: each score is the same dot product and each row's softmax the same
    reduction (the skipped keys would only add exact zeros at the row's end; a window's old
    keys stay in the row, masked, so every row keeps its alignment). Bit for bit on most CPUs;
    on some the GEMM sums a block of rows' dot products in another order than the whole
    matrix's (a few float32 ulps). Every no-grad path uses these blocks, so the capture, a
    prediction and a tile recomputed later agree exactly. `out=` makes this no-grad only.
    Written into the workspace when one is given.
    """
    B, nh, T, _ = qh.shape
    shape = (B, nh, T, T)
    pattern = ws.scores(shape, qh) if ws is not None else qh.new_empty(shape)
    zeroed = ws is not None and ws.zero_above_diagonal == shape
    if ws is not None:
        ws.zero_above_diagonal = None  # until this pattern is complete
    blocks = query_blocks(T)
    scratch = qh.new_empty(B * nh * max((b - a) * b for a, b in blocks))  # the largest block's scores
    for a, b in blocks:
        scores = scratch[: B * nh * (b - a) * b].view(B, nh, b - a, b)
        pattern_rows(qh, kh, a, b, window, cap, out=pattern[:, :, a:b, :b], scores=scores)
        if not zeroed:
            pattern[:, :, a:b, b:].zero_()
    if ws is not None:
        ws.zero_above_diagonal = shape
    return pattern


PatternRowsObserver = Callable[[int, torch.Tensor], None]


def attend_by_blocks(qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, window: int, cap: float,
                     observe: PatternRowsObserver | None = None) -> torch.Tensor:
    """pattern @ v, (B, nh, T, hs), one block of query rows at a time; `observe(first_row, rows)`
    sees each block of pattern rows (B, nh, r, b) on the way.

    Each block's product with v runs over its visible keys 0..b-1 only, as `values_by_blocks`
    does for a whole pattern, so both give the same bits.
    """
    B, nh, T, hs = vh.shape
    z = vh.new_empty(B, nh, T, hs)
    blocks = query_blocks(T)
    flat = vh.new_empty(B * nh * max((b - a) * b for a, b in blocks))  # the largest block of rows
    values = _BlockValues(z, blocks)
    for a, b in blocks:
        rows = flat[: B * nh * (b - a) * b].view(B, nh, b - a, b)  # contiguous, so the softmax and product stream
        pattern_rows(qh, kh, a, b, window, cap, out=rows, scores=rows)
        if observe is not None:
            observe(a, rows)
        values.write(a, b, rows, vh)
    return z


def attend_rows(qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, first: int, window: int, cap: float) -> torch.Tensor:
    """pattern @ v for query rows first.. alone, (B, nh, T - first, hs): what a prediction's last
    layer needs at its last position. The same arithmetic as `attend_by_blocks` on a block of
    its own, so few rows round as a short block does (a few float32 ulps from the capture's)."""
    T = vh.shape[2]
    rows = pattern_rows(qh, kh, first, T, window, cap)  # (B, nh, T - first, T)
    return rows @ vh  # (B, nh, T - first, hs)


def values_by_blocks(pattern: torch.Tensor, vh: torch.Tensor) -> torch.Tensor:
    """pattern @ v, (B, nh, T, hs), by the query blocks of `attend_by_blocks` and over each
    block's visible keys only: a third less work than the whole product at long prompts (the
    future keys would only add exact zeros), and the same bits as the path that never holds
    the whole pattern. A causal pattern's future entries are never read."""
    B, nh, T, hs = vh.shape
    z = vh.new_empty(B, nh, T, hs)
    blocks = query_blocks(T)
    values = _BlockValues(z, blocks)
    for a, b in blocks:
        values.write(a, b, pattern[:, :, a:b, :b], vh)
    return z


class _BlockValues:
    """Writes each block's rows @ v into rows a..b-1 of z (B, nh, T, hs) by way of one
    contiguous (B, nh, b - a, hs) buffer: the same kernel and bits as a product into z's strided
    rows, which torch's batched product runs slower than a product into a contiguous buffer
    and the copy together."""

    def __init__(self, z: torch.Tensor, blocks: list[tuple[int, int]]):
        B, nh, _, hs = z.shape
        self.z = z
        self.flat = z.new_empty(B * nh * max(b - a for a, b in blocks) * hs)

    def write(self, a: int, b: int, rows: torch.Tensor, vh: torch.Tensor) -> None:
        B, nh, _, hs = self.z.shape
        out = self.flat[: B * nh * (b - a) * hs].view(B, nh, b - a, hs)
        torch.matmul(rows, vh[:, :, :b], out=out)  # (B, nh, b - a, hs)
        self.z[:, :, a:b] = out
