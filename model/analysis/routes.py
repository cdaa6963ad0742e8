"""Information-flow routes (Ferrando & Voita 2024, "Information Flow Routes: Automatically
Interpreting Language Models at Scale", arXiv 2403.00824), as Meta's LLM Transparency Tool
draws them: a graph from one position's last residual back through the layers to the input
tokens, each edge the share one part had in what a residual position received.

**Contribution (the paper's eq. 3-4).** A residual position receives a sum y = sum of parts. A
part's proximity is max(||y||_1 - ||y - part||_1, 0) and its contribution is its proximity over
the sum of every part's proximity, the residual included (`contributions`).

**The parts of a layer** (`LayerParts`):
- Attention (eq. 5): at query q, head h's write splits by key position k into
  pattern_h[q, k] * v_k W_O,h; the parts are these (k, h) pieces and the residual x_q, and
  y = x_q + attention output (resid_mid). The value bias is inside v_k, so it is spread over the
  keys by the pattern; the output projection's bias b_O is in y but in no part (the tool's
  choice). Where the family normalises the attention's output (Gemma 2/3, OLMo 2) each piece is
  the normed piece: the norm with its scale frozen at q (as the heads' sum plus b_O gave it) is
  linear, and its own bias, like b_O, is in y alone.
- MLP: y = resid_mid + MLP output (resid_post); the parts are the MLP's write and resid_mid.
- Parallel blocks (GPT-NeoX, GPT-J, Phi): both sublayers read the block's input x, so a layer
  has one sum y = x_q + attention output + MLP output (resid_post) with the residual, every
  (k, h) piece and the MLP's write as its parts.

**Feature clamps.** Each clamp's addition goes into the part of the layer whose output its SAE
reads, so the attention's side is the real resid_mid - x and the MLP's part the rest of the
real update x_next - resid_mid (x_next - x - the attention's side in a parallel block): a clamp
of z adds head h's change through W_O (and the frozen output norm, whose scale saw it) to head
h's piece at k = q, the head's own row, where the clamp edited its output; clamps of the
attention's output and of resid_mid are in y (the attention's output) but, like b_O, in no
piece; clamps of the neurons, of the MLP's output, of resid_post and of the next layer's
resid_pre (applied at this layer's output) are in the MLP's part.

**The graph (the paper's Algorithm 1, top-down).** Nodes are a residual stream at a position:
the token embedding ("embed"), after a layer's attention ("attn", resid_mid), after the layer
("out", resid_post), and the MLP block ("mlp"). From the chosen position's last "out" node, each
node on the route is expanded: its parts' contributions are computed, those at or below the
threshold dropped and, with `renormalize` (the tool's "renormalise after threshold", on by
default), the rest rescaled to sum to 1 again; each kept part is an edge, and its source node
joins the route. Attention edges k -> q sum their kept heads' contributions (the split per head
is kept beside the edge). An MLP's edge is drawn twice, resid_mid -> mlp -> out, with the same
width, as the tool draws it.

**Token shares.** Each input token's share of the route is the sum over the route's paths from
the chosen position down to that token's embedding of the product of the edges' contributions;
the MLP node passes on all it receives to the residual it read (its one input).

**Cost.** Nothing is computed for a layer's whole (T, T, heads, width) decomposition: a layer
computes each head's v_k W_O,h for the keys the route's queries can see, (T, nh, C), once; then
each expanded query's parts, one query at a time, by blocks of keys. Memory stays at a few
(T, nh, C) arrays; time grows with the nodes the route expands (`Routes.expanded`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from transformer_viewer.model.analysis.attribution import clamp_z_writes, frozen_norm
from transformer_viewer.model.analysis.row_clamps import RowClamps, edit_row, row_clamps
from transformer_viewer.model.capture.interventions import Intervention, requested
from transformer_viewer.model.decoder.gpt import ParallelBlock
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels.attention_kernels import attend_by_blocks, pattern_rows

DEFAULT_THRESHOLD = 0.04  # the transparency tool's default
KINDS = ("embed", "attn", "mlp", "out")  # node kinds
EMBED, ATTN, MLP, OUT = range(4)
EDGE_KINDS = ("attention", "residual", "mlp")
ATTENTION, RESIDUAL, MLP_EDGE = range(3)
KEY_BLOCK = 512  # keys whose parts are held at once for one query: (512, nh, C) floats


def contributions(parts: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """Each part's share of `whole` (eq. 3-4): parts (..., N, C), whole (..., C) -> (..., N)
    proximities max(||whole||_1 - ||whole - part||_1, 0) over their sum (0 where all are 0)."""
    prox = proximities(parts, whole)
    total = prox.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, prox / total.clamp_min(1e-30), torch.zeros_like(prox))


def proximities(parts: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """max(||whole||_1 - ||whole - part||_1, 0) for each part (..., N, C) -> (..., N), float64 sums."""
    norm = whole.double().abs().sum(dim=-1, keepdim=True)  # (..., 1)
    dist = (whole.unsqueeze(-2) - parts).double().abs().sum(dim=-1)  # (..., N)
    return (norm - dist).clamp_min(0.0)


def threshold_and_renormalize(c: np.ndarray, threshold: float, renormalize: bool) -> np.ndarray:
    """Contributions at or below `threshold` dropped; with `renormalize` the rest rescaled to
    sum to what they all summed to (1, or 0 where nothing is left)."""
    kept = np.where(c > threshold, c, 0.0)
    if renormalize:
        total = kept.sum()
        kept = kept / total if total > 0 else kept
    return kept


@dataclass(frozen=True)
class Routes:
    """The route from one position down to the input tokens."""

    position: int
    threshold: float
    renormalized: bool
    n_layer: int
    n_head: int
    nodes: np.ndarray  # (N, 3) int32: kind (index into KINDS), layer (-1 for "embed"), position
    edges: np.ndarray  # (E, 2) int32: source node, target node (the target received the part)
    edge_kind: np.ndarray  # (E,) int8: index into EDGE_KINDS
    weight: np.ndarray  # (E,) float32: the part's contribution to the target (after the threshold)
    head_weight: np.ndarray  # (E, nh) float32: an attention edge's contribution per head (0 elsewhere)
    token_share: np.ndarray  # (T,) float32: each input token's share of the route
    expanded: int  # nodes whose parts were computed

    def node_name(self, i: int) -> str:
        kind, layer, pos = (int(v) for v in self.nodes[i])
        return f"{KINDS[kind]}[{pos}]" if kind == 0 else f"{KINDS[kind]}{layer}[{pos}]"

    def to_json(self) -> dict:
        """Nodes and edges with their contributions, for `--json` and the JSON export."""
        nodes = [dict(id=i, kind=KINDS[int(k)], layer=None if k == 0 else int(layer), position=int(pos))
                 for i, (k, layer, pos) in enumerate(self.nodes)]
        edges = []
        for e, (src, dst) in enumerate(self.edges):
            edge = dict(source=int(src), target=int(dst), kind=EDGE_KINDS[int(self.edge_kind[e])],
                        contribution=float(self.weight[e]))
            if self.edge_kind[e] == 0:
                edge["heads"] = {str(h): float(w) for h, w in enumerate(self.head_weight[e]) if w > 0}
            edges.append(edge)
        return dict(position=self.position, threshold=self.threshold, renormalized=self.renormalized,
                    nodes=nodes, edges=edges, token_share=[float(v) for v in self.token_share],
                    expanded=self.expanded)


@dataclass(frozen=True)
class QueryAttention:
    """What the attention parts of one query are made of."""

    pattern: torch.Tensor  # (nh, q + 1): each head's pattern row (a masked head's is zero)
    frozen: object  # the frozen norm on the attention's output (FrozenNorm), or None
    out: torch.Tensor  # (C,): resid_mid - resid_pre at q, every clamp of the attention's side included
    z_clamp: torch.Tensor | None  # (nh, C): each head's clamp of z through W_O (and the norm); None: none


class LayerParts:
    """What one layer adds at a query position, split into the paper's parts, computed from the
    layer's resid_pre x (1, T, C) and the next layer's (its resid_post) for the queries asked."""

    def __init__(self, block, x: torch.Tensor, x_next: torch.Tensor, last: int, masked: np.ndarray, ablation: str,
                 clamps: Callable[[int], RowClamps | None] | None = None):
        attn = block.attn
        self.clamps = clamps  # query -> the block's feature clamps at that row (None: no clamps)
        self.block, self.x, self.x_next = block, x[0].float(), x_next[0].float()
        self.parallel = isinstance(block, ParallelBlock)
        nh, hs = attn.n_head, attn.head_size
        mean_ablated = ablation == "mean" and bool(masked.any())
        rows = x if mean_ablated else x[:, : last + 1]  # zero ablation is causal: keys past `last` never matter
        self.qh, self.kh, vh = attn.heads_qkv(block.ln_1(rows))  # (1, nh, T', hs) each
        self.masked = torch.tensor(masked, device=x.device)  # (nh,); a copy: the mask is read-only
        w_o = attn.c_proj.weight.float().T.reshape(nh, hs, -1)  # (nh, hs, C): z_h @ w_o[h] is head h's write
        # Each head's v_k W_O,h for every key the queries can see: (T', nh, C).
        self.vo = torch.einsum("hkd,hdc->khc", vh[0].float(), w_o)
        self.vh = vh[0]  # (nh, T', hs): the heads' outputs at a clamped query are made of these
        self.mean_z = self.mean_zh = None
        if mean_ablated:  # a mean-ablated head writes its mean output over every position, at every query
            z = attend_by_blocks(self.qh, self.kh, vh, attn.window, attn.softcap)[0]  # (nh, T, hs)
            self.mean_zh = z.float().mean(dim=1)  # (nh, hs)
            self.mean_z = torch.einsum("hd,hdc->hc", self.mean_zh, w_o)  # (nh, C)
        self.bias = attn.c_proj.bias.float() if attn.c_proj.bias is not None else torch.zeros(
            self.vo.shape[-1], device=x.device)

    def pattern_row(self, q: int) -> torch.Tensor:
        """(nh, q + 1): each head's pattern row at query q; a masked head's is zero."""
        row = pattern_rows(self.qh, self.kh, q, q + 1, self.block.attn.window,
                           self.block.attn.softcap)[0, :, 0].float()  # (nh, q + 1)
        return torch.where(self.masked[:, None], torch.zeros((), device=row.device), row)

    def attention(self, q: int) -> QueryAttention:
        """What the parts of query q are made of."""
        a = self.pattern_row(q)
        raw = torch.einsum("hk,khc->c", a, self.vo[: q + 1])  # the heads' sum, before b_O
        if self.mean_z is not None:
            raw = raw + self.mean_z[self.masked].sum(dim=0)
        clamps = self.clamps(q) if self.clamps is not None else None
        z_clamp = clamp_z_writes(self.block.attn, self.z_row(q, a), clamps) if clamps is not None else None
        if z_clamp is not None:
            raw = raw + z_clamp.sum(dim=0)
        post = self.block.ln_post_attn
        if isinstance(post, nn.Identity):
            frozen, out = None, raw + self.bias
        else:
            frozen = frozen_norm(post, raw + self.bias)
            out = frozen.linear(raw + self.bias) + (frozen.bias if frozen.bias is not None else 0.0)
            z_clamp = None if z_clamp is None else frozen.linear(z_clamp)
        if clamps is not None:  # the clamps of the attention's output and of resid_mid: in the output, in no piece
            out, _added = edit_row(clamps, "hook_attn_out", out)
            mid, d_mid = edit_row(clamps, "hook_resid_mid", self.x[q] + out)
            out = mid - self.x[q] if d_mid is not None else out
        return QueryAttention(a, frozen, out, z_clamp)

    def z_row(self, q: int, a: torch.Tensor) -> torch.Tensor:
        """The heads' outputs at query q, (nh, hs), as hook_z holds them before any clamp, from
        the pattern row a (nh, q + 1) (a masked head's is zero, or its mean output)."""
        z = torch.einsum("hk,hkd->hd", a, self.vh[:, : q + 1].float())  # (nh, hs)
        if self.mean_zh is not None:
            z = torch.where(self.masked[:, None], self.mean_zh, z)
        return z.to(self.vh.dtype)

    def pieces_proximity(self, q: int, a: torch.Tensor, frozen, y: torch.Tensor,
                         z_clamp: torch.Tensor | None = None) -> torch.Tensor:
        """Proximity of every (k, h) piece pattern[q, k] * v_k W_O,h to y, (q + 1, nh) float64,
        by blocks of keys. A mean-ablated head's write is one piece of its own, at k = q. A
        clamp of z adds head h's change z_clamp[h] (nh, C) to its piece at k = q: the head's
        own row, where the clamp edited its output."""
        out = torch.zeros(q + 1, a.shape[0], dtype=torch.float64, device=y.device)
        norm = y.double().abs().sum()
        for k0 in range(0, q + 1, KEY_BLOCK):
            k1 = min(q + 1, k0 + KEY_BLOCK)
            pieces = a[:, k0:k1].T[:, :, None] * self.vo[k0:k1]  # (k1 - k0, nh, C)
            if frozen is not None:
                pieces = frozen.linear(pieces)
            if z_clamp is not None and k0 <= q < k1:
                pieces[q - k0] += z_clamp
            dist = (y - pieces).abs().sum(dim=-1, dtype=torch.float64)  # (k1 - k0, nh)
            out[k0:k1] = (norm - dist).clamp_min(0.0)
        if self.mean_z is not None:
            write = self.mean_z if frozen is None else frozen.linear(self.mean_z)  # (nh, C)
            if z_clamp is not None:
                write = write + z_clamp
            prox = (norm - (y - write).abs().sum(dim=-1, dtype=torch.float64)).clamp_min(0.0)  # (nh,)
            out[q] = torch.where(self.masked, prox, out[q])
        return out


@torch.inference_mode()
def information_routes(session, position: int | None = None, threshold: float = DEFAULT_THRESHOLD,
                       renormalize: bool = True, intervention: Intervention | None = None, mask=None, ablation: str | None = None,
                       step: Callable[[int, int], None] | None = None) -> Routes:
    """The route from `position` (default: the last) down to the input tokens, in the session's
    run under `mask`. `step(i, n_layer)` hears of each layer as it starts and may raise to stop."""
    change = requested(session.config, intervention, mask, ablation)  # a bare mask: made by Intervention.make
    mask, ablation = change.mask, change.ablation
    if not 0.0 <= float(threshold) < 1.0 or threshold != threshold:
        raise ModelError(f"threshold {threshold} must be at least 0 and below 1")
    if session.tokens is None or not session.tokens.ids:
        raise ModelError("the prompt is empty; type some text first")
    T = len(session.tokens.ids)
    p = session._position(position, T)  # negative counts from the end
    try:
        session.residuals()
    except ModelError:
        session.predict(None)
    resid = session.masked_residuals(change)  # resid_pre of each layer, then the last resid_post
    model, c = session.model, session.config
    L, nh = c.n_layer, c.n_head
    graph = _Graph(nh)
    top = graph.node(OUT, L - 1, p)
    frontier = {p}  # positions whose "out" node in this layer is on the route
    for i, layer in enumerate(range(L - 1, -1, -1)):
        if step is not None:
            step(i, L)
        if not frontier:
            break
        parts = LayerParts(model.blocks[layer], resid[layer], resid[layer + 1], max(frontier), mask[layer], ablation,
                           _layer_clamps(session, change, layer))
        below = set()
        for q in sorted(frontier):
            below |= _expand(graph, parts, layer, q, threshold, renormalize)
        frontier = below
    return graph.routes(top, p, threshold, renormalize, L, T)


def _expand(graph: _Graph, parts: LayerParts, layer: int, q: int, threshold: float, renormalize: bool) -> set[int]:
    """Expand layer `layer`'s nodes at query q; returns the positions of the layer below whose
    residual joins the route."""
    x, y_out = parts.x[q], parts.x_next[q]
    attention = parts.attention(q)
    a, frozen, attn_out = attention.pattern, attention.frozen, attention.out
    out_node = graph.node(OUT, layer, q)

    def source(pos: int) -> int:  # the residual stream entering this layer at pos
        return graph.node(EMBED, -1, pos) if layer == 0 else graph.node(OUT, layer - 1, pos)

    if parts.parallel:  # one sum: the residual, every (k, h) piece and the MLP's write
        target, y, mlp_out = out_node, y_out, y_out - x - attn_out
        mlp_reads = source(q)
    else:  # out = mid + the MLP's write, then mid = x + the attention's pieces
        mid = x + attn_out
        mid_node = graph.node(ATTN, layer, q)
        kept = threshold_and_renormalize(contributions(torch.stack([mid, y_out - mid]), y_out).cpu().numpy(),
                                         threshold, renormalize)
        graph.expanded += 1
        if kept[0] > 0:
            graph.edge(mid_node, out_node, RESIDUAL, kept[0])
        if kept[1] > 0:
            graph.mlp(layer, q, out_node, mid_node, kept[1])
        if not kept.any():
            return set()
        target, y, mlp_out = mid_node, mid, None
    pieces = parts.pieces_proximity(q, a, frozen, y, attention.z_clamp)  # (q + 1, nh)
    extra = torch.stack([x] if mlp_out is None else [x, mlp_out])
    prox = torch.cat([pieces.reshape(-1), proximities(extra, y)])
    total = float(prox.sum())
    c = (prox / total).cpu().numpy() if total > 0 else np.zeros(prox.shape[0])
    kept = threshold_and_renormalize(c, threshold, renormalize)
    graph.expanded += 1
    n = pieces.numel()
    by_key = kept[:n].reshape(q + 1, -1)  # (q + 1, nh)
    below = set()
    if kept[n] > 0:
        graph.edge(source(q), target, RESIDUAL, kept[n])
        below.add(q)
    if mlp_out is not None and kept[n + 1] > 0:
        graph.mlp(layer, q, target, mlp_reads, kept[n + 1])
        below.add(q)
    for k in np.nonzero(by_key.sum(axis=1) > 0)[0]:
        graph.edge(source(int(k)), target, ATTENTION, float(by_key[k].sum()), heads=by_key[k])
        below.add(int(k))
    return below


def _layer_clamps(session, change: Intervention, layer: int) -> Callable[[int], RowClamps | None] | None:
    """Query -> block `layer`'s feature clamps at that row; None where no clamp is in `change`."""
    if not change.clamps:
        return None
    return lambda q: row_clamps(session, change, q).get(layer)


class _Graph:
    """Nodes and edges as they are found, then the frozen `Routes`."""

    def __init__(self, n_head: int):
        self.n_head = n_head
        self.index: dict[tuple[int, int, int], int] = {}
        self.edges: list[tuple[int, int, int, float, np.ndarray | None]] = []
        self.pass_through: dict[int, int] = {}  # an MLP node -> the residual node it reads
        self.expanded = 0

    def node(self, kind: int, layer: int, pos: int) -> int:
        return self.index.setdefault((kind, layer, pos), len(self.index))

    def edge(self, src: int, dst: int, kind: int, weight: float, heads: np.ndarray | None = None) -> None:
        self.edges.append((src, dst, kind, float(weight), heads))

    def mlp(self, layer: int, q: int, target: int, reads: int, weight: float) -> None:
        """The MLP's edge, drawn as the tool draws it: reads -> mlp -> target, both of the MLP's
        width; the flow of token shares passes the MLP node straight on to what it reads."""
        node = self.node(MLP, layer, q)
        self.edge(node, target, MLP_EDGE, weight)
        self.edge(reads, node, MLP_EDGE, weight)
        self.pass_through[node] = reads

    def routes(self, top: int, p: int, threshold: float, renormalize: bool, L: int, T: int) -> Routes:
        nodes = np.array(sorted(self.index, key=self.index.get), dtype=np.int32).reshape(-1, 3)
        E = len(self.edges)
        edges = np.array([(s, d) for s, d, *_ in self.edges], dtype=np.int32).reshape(E, 2)
        kind = np.array([k for _, _, k, _, _ in self.edges], dtype=np.int8)
        weight = np.array([w for *_, w, _ in self.edges], dtype=np.float32)
        head_weight = np.zeros((E, self.n_head), dtype=np.float32)
        for e, (*_, heads) in enumerate(self.edges):
            if heads is not None:
                head_weight[e] = heads
        return Routes(position=p, threshold=float(threshold), renormalized=renormalize, n_layer=L,
                      n_head=self.n_head, nodes=nodes, edges=edges, edge_kind=kind, weight=weight,
                      head_weight=head_weight, token_share=self._shares(nodes, top, T), expanded=self.expanded)

    def _shares(self, nodes: np.ndarray, top: int, T: int) -> np.ndarray:
        """Flow from the top node down every edge (times its contribution; an MLP node passes all
        it receives to the residual it read), summed at each token's embedding node."""
        into: dict[int, list[tuple[int, float]]] = {}
        for s, d, _k, w, _ in self.edges:
            into.setdefault(d, []).append((s, w))  # an MLP node's own input edge is never followed
        flow = np.zeros(len(nodes), dtype=np.float64)
        flow[top] = 1.0
        # Top-down: a higher layer first; within a layer "out", then "mlp", then "attn"; the embeddings last.
        order = sorted(range(len(nodes)), key=lambda i: (-nodes[i, 1], -nodes[i, 0]))
        for n in order:
            if flow[n] == 0:
                continue
            if n in self.pass_through:
                flow[self.pass_through[n]] += flow[n]
                continue
            for s, w in into.get(n, []):
                flow[s] += flow[n] * w
        share = np.zeros(T, dtype=np.float32)
        for i, (k, _layer, pos) in enumerate(nodes):
            if k == 0:
                share[pos] = flow[i]
        return share
