"""What a trace does not keep, recomputed when a view asks: a head's pattern at full resolution
(whole, or any rectangular tile of it), and a layer's MLP activations.

Both start from the residual stream the session cached for the trace's run and go through the
model's own modules: the block runs up to the attention's input (or the MLP's output) and
stops there, the attention makes its queries and keys with `heads_qkv` and its pattern rows
with `attention_kernels.pattern_rows`, by the same query blocks as the forward and in a batch of heads as the
forward's (`heads_computed_with`). So a recomputed value is the value the forward computed, bit
for bit on the same kernels, and every family switch the attention has (masking, scale,
soft-capping, windows) applies without a copy of it here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from transformer_viewer.model.capture import host_arrays
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.capture.trace import Trace
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels.attention_kernels import pattern_rows, query_blocks


class _Stop(Exception):
    """Raised by a hook to end a forward once what was wanted has been seen."""


def _check_head(session: Session, layer: int, head: int) -> None:
    L, nh = session.config.n_layer, session.config.n_head
    if not 0 <= layer < L:
        raise ModelError(f"layer {layer} does not exist; the model has layers 0..{L - 1}")
    if not 0 <= head < nh:
        raise ModelError(f"head {head} does not exist; the model has heads 0..{nh - 1}")


@torch.inference_mode()
def layer_queries_keys(session: Session, trace: Trace, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(qh, kh) of `layer` in the trace's run, (1, nh, T, hs) each, as the attention scores them.

    The last layer asked for stays cached in the session, so the tiles of one head (or of its
    neighbours) cost only their pattern rows.
    """
    key = (trace.run_id, layer)
    cached = session.recompute_cache.get("qk")
    if cached is not None and cached[0] == key:
        return cached[1]
    x = session.resid_pre(trace, layer)
    block = session.model.blocks[layer]
    seen: dict[str, torch.Tensor] = {}

    def take_input(_module, args):
        seen["x"] = args[0]
        raise _Stop

    handle = block.attn.register_forward_pre_hook(take_input)
    try:
        block(x)
    except _Stop:
        pass
    finally:
        handle.remove()
    qh, kh, _ = block.attn.heads_qkv(seen["x"])  # (1, nh, T, hs) each
    session.recompute_cache["qk"] = (key, (qh, kh))
    return qh, kh


def _row_blocks(session: Session, trace: Trace, layer: int, head: int, first: int,
                end: int) -> Iterator[tuple[int, torch.Tensor]]:
    """(row, rows) for the forward's query blocks that cover rows first..end-1: rows is
    (r, b) float32 against keys 0..b-1 (every later key is in the future, zero).

    `rows` is a view of one buffer that the next block overwrites: copy what is kept. Each
    block's scores and softmax stay in that buffer (a fresh megabyte per block would be
    page-faulted in each time: half the cost of a whole pattern at 4,096 tokens).
    """
    _check_head(session, layer, head)
    T = trace.n_tokens
    if not 0 <= first <= end <= T:
        raise ModelError(f"rows {first}..{end} are outside the prompt's {T} tokens")
    blocks = [(a, b) for a, b in query_blocks(T) if b > first and a < end]
    if not blocks:
        return
    qh, kh = layer_queries_keys(session, trace, layer)
    h0, h1 = heads_computed_with(head, session.config.n_head)
    qh, kh = qh[:, h0:h1], kh[:, h0:h1]  # (1, h1 - h0, T, hs)
    attn = session.model.blocks[layer].attn
    n = h1 - h0
    flat = qh.new_empty(n * max((b - a) * b for a, b in blocks))
    with torch.inference_mode():
        for a, b in blocks:
            rows = flat[:n * (b - a) * b].view(1, n, b - a, b)  # contiguous, as the forward's block
            pattern_rows(qh, kh, a, b, attn.window, attn.softcap, out=rows, scores=rows)
            r0, r1 = max(a, first), min(b, end)
            yield r0, rows[0, head - h0, r0 - a:r1 - a]  # (r1 - r0, b)


def heads_computed_with(head: int, n_head: int) -> tuple[int, int]:
    """The heads (h0, h1) whose pattern rows are recomputed together to give `head`'s: two
    neighbours, or the only head.

    The forward scores a block of rows of all its heads in one batched product, which rounds
    each head's matrix as a single-threaded product does, whatever the batch. One head's
    product on its own is a plain matrix product, which MKL (on its AVX2 path, for one) splits
    over threads and sums in another order: scores a float32 ulp apart. A batch of two heads
    takes the forward's batched kernel, at twice the work of one head rather than every
    head's. A model of one head has only the plain product, in both places.
    """
    if n_head == 1:
        return 0, 1
    h0 = min(head, n_head - 2)
    return h0, h0 + 2


def iter_pattern_rows(session: Session, trace: Trace, layer: int, head: int, first: int = 0,
                      end: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """(row, rows) blocks of head (layer, head)'s pattern covering query rows first..end-1:
    rows is (r, T) float32, zeros in the future. One block in memory at a time."""
    T = trace.n_tokens
    for row, rows in _row_blocks(session, trace, layer, head, first, T if end is None else end):
        out = np.zeros((rows.shape[0], T), dtype=np.float32)
        out[:, :rows.shape[1]] = rows.cpu().numpy()
        yield row, out


def pattern_tile(session: Session, trace: Trace, layer: int, head: int, rows: tuple[int, int],
                 cols: tuple[int, int]) -> np.ndarray:
    """Query rows rows[0]..rows[1]-1 against keys cols[0]..cols[1]-1 of one head, float32."""
    T = trace.n_tokens
    (r0, r1), (c0, c1) = rows, cols
    if not (0 <= r0 <= r1 <= T and 0 <= c0 <= c1 <= T):
        raise ModelError(f"tile rows {r0}..{r1}, columns {c0}..{c1} are outside the prompt's {T} tokens")
    tile = host_arrays.zeros((r1 - r0, c1 - c0), np.float32)  # not np.zeros: see host_arrays
    for row, block in _row_blocks(session, trace, layer, head, r0, r1):
        visible = min(block.shape[1], c1)  # keys past the block's end are all future: zero
        if visible > c0:
            tile[row - r0:row - r0 + block.shape[0], :visible - c0] = block[:, c0:visible].cpu().numpy()
    return tile


def head_pattern(session: Session, trace: Trace, layer: int, head: int) -> np.ndarray:
    """The full (T, T) float32 pattern of one head."""
    T = trace.n_tokens
    return pattern_tile(session, trace, layer, head, (0, T), (0, T))


def save_head_pattern(session: Session, trace: Trace, layer: int, head: int, path: str,
                      progress: Callable[[int, int], None] | None = None,
                      is_cancelled: Callable[[], bool] | None = None,
                      labels: tuple[str, ...] | None = None) -> bool:
    """Write one head's (T, T) float32 pattern to `path`, block by block (the pattern is never
    whole in memory): as .npy, or as .csv (a path ending in .csv: a header of the token
    `labels`, each row its token's label then its values with 9 significant digits, which
    float32 reads back exactly). Written by model/files/atomic_write.py's `write_chunks`: a cancelled
    or failed export leaves no partial file, a new file gets the mode an ordinary one does
    (0666 less the umask), a replaced one keeps its own. False when cancelled."""
    import csv
    import io
    import os

    from transformer_viewer.model.files.atomic_write import write_chunks

    T = trace.n_tokens
    as_csv = os.fspath(path).lower().endswith(".csv")
    if as_csv:
        labels = tuple(labels) if labels is not None else tuple(trace.labels)
        if len(labels) != T:
            raise ModelError(f"{len(labels)} labels for a pattern of {T} tokens")

    def csv_lines(rows) -> bytes:
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        return text.getvalue().encode("utf-8")

    def pieces():
        if as_csv:
            yield csv_lines([["", *labels]])
        else:
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                header, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
                         "shape": (T, T)})
            yield header.getvalue()
        for row, block in iter_pattern_rows(session, trace, layer, head):
            if is_cancelled is not None and is_cancelled():
                raise _Stop
            block = np.ascontiguousarray(block, dtype=np.float32)  # (rows, T)
            if as_csv:
                yield csv_lines([labels[row + i], *map("{:.9g}".format, values)]
                                for i, values in enumerate(block.tolist()))
            else:
                yield block.tobytes()
            if progress is not None:
                progress(row + len(block), T)

    try:
        write_chunks(path, pieces())
    except _Stop:
        return False
    return True


@torch.inference_mode()
def mlp_activations(session: Session, trace: Trace, layer: int) -> np.ndarray:
    """(T, n_mlp) float32 post-activations of `layer` in the trace's run, recomputed from its
    resid_pre through the block (with the run's head mask on that layer's heads)."""
    L = session.config.n_layer
    if not 0 <= layer < L:
        raise ModelError(f"layer {layer} does not exist; the model has layers 0..{L - 1}")
    x = session.resid_pre(trace, layer)
    seen: dict[str, torch.Tensor] = {}

    def take(_m, _inp, out):
        seen["post"] = out
        raise _Stop

    named = session.intervention_hooks(trace.intervention, layer)
    named = [(n, fn) for n, fn in named if n.startswith(f"blocks.{layer}.")]
    named.append((f"blocks.{layer}.mlp.hook_post", take))
    try:
        with hooks(session.model, named):
            session.model.blocks[layer](x)
    except _Stop:
        pass
    return seen["post"][0].float().cpu().numpy()
