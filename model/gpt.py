"""A decoder-only transformer written out in full: pre-LayerNorm blocks, explicit causal
attention, GELU MLP, learned (or sinusoidal) positions. Parameter names follow GPT-2 / nanoGPT
(`c_attn`, `c_proj`, `c_fc`, `ln_1`, ...) so checkpoints map onto it with few renames.

Every activation passes through a named HookPoint; capture and head masks work by hooking
those, so this file knows nothing about either.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from transformer_viewer.model.config import GPTConfig
from transformer_viewer.model.hooks import HookPoint
from transformer_viewer.model.linear import Linear

# Causal masks by (T, device), shared by every layer: building a (T, T) mask per layer per
# forward cost more than the masked_fill that uses it at T = 1024.
_FUTURE_MASKS: dict[tuple[int, str], torch.Tensor] = {}


def future_mask(T: int, device) -> torch.Tensor:
    """(T, T) bool, True above the diagonal (the keys a query may not see)."""
    key = (T, str(device))
    mask = _FUTURE_MASKS.get(key)
    if mask is None:
        # A normal tensor even when first asked for under inference_mode, so a later training
        # step can still use it.
        with torch.inference_mode(False):
            mask = torch.ones(T, T, dtype=torch.bool, device=device).triu_(1)
        if len(_FUTURE_MASKS) >= 16:
            _FUTURE_MASKS.clear()
        _FUTURE_MASKS[key] = mask
    return mask

class AttentionWorkspace:
    """One reusable block of memory for the (B, nh, T, T) attention scores of every layer.

    A fresh 50 MB tensor per layer (T = 1024) costs more in page faults than the product that
    fills it. Only valid while nothing keeps a layer's pattern past its hook (the session copies
    it out at once) and nothing records for autograd: `attention_workspace` sets it.
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


@contextlib.contextmanager
def attention_workspace(model: GPT, workspace: AttentionWorkspace) -> Iterator[None]:
    """Let every attention layer compute its scores and pattern in `workspace` (in place)."""
    layers = [block.attn for block in model.blocks]
    for attn in layers:
        attn.workspace = workspace
    try:
        yield
    finally:
        for attn in layers:
            attn.workspace = None


QUERY_BLOCK = 64  # query rows per block of the no-grad attention


def query_blocks(T: int) -> list[tuple[int, int]]:
    """The (first, end) query rows of each block the no-grad attention computes at once.

    A few-row tail joins the block before it: it would get a matrix-vector kernel that sums in
    another order, and every path (capture, prediction, a tile recomputed later) must round alike.
    """
    starts = list(range(0, T, QUERY_BLOCK))
    if len(starts) > 1 and T - starts[-1] < QUERY_BLOCK // 2:
        starts.pop()
    return list(zip(starts, starts[1:] + [T], strict=True))


PatternRowsObserver = Callable[[int, torch.Tensor], None]


@contextlib.contextmanager
def observe_pattern_rows(model: GPT, observers: dict[int, PatternRowsObserver]) -> Iterator[None]:
    """Call `observers[layer](first_row, rows)` with each block of pattern rows, (B, nh, r, b),
    as the no-grad attention computes it, so a summary can be built without the whole pattern."""
    for layer, fn in observers.items():
        model.blocks[layer].attn.pattern_rows_observer = fn
    try:
        yield
    finally:
        for layer in observers:
            model.blocks[layer].attn.pattern_rows_observer = None

_ACTIVATIONS = {
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's "gelu_new"
    "gelu": F.gelu,  # exact erf GELU, as nanoGPT
    "relu": F.relu,
}


def sinusoidal_positions(T: int, C: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """The fixed sin/cos table of "Attention Is All You Need", (T, C)."""
    pos = torch.arange(T, device=device, dtype=torch.float32)[:, None]  # (T, 1)
    i = torch.arange(0, C, 2, device=device, dtype=torch.float32)  # (C/2,)
    angle = pos / torch.pow(10000.0, i / C)  # (T, C/2)
    table = torch.zeros(T, C, device=device)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : C // 2])
    return table.to(dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.head_size = config.head_size
        self.c_attn = Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.hook_q = HookPoint()  # (B, T, nh, hs)
        self.hook_k = HookPoint()  # (B, T, nh, hs)
        self.hook_v = HookPoint()  # (B, T, nh, hs)
        self.hook_pattern = HookPoint()  # (B, nh, T, T), rows are queries
        self.hook_z = HookPoint()  # (B, T, nh, hs), per-head outputs before c_proj
        self.workspace: AttentionWorkspace | None = None  # set only by attention_workspace()
        self.pattern_rows_observer: PatternRowsObserver | None = None  # set only by observe_pattern_rows()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        qh, kh, vh = self.heads_qkv(x)  # each (B, nh, T, hs)
        if torch.is_grad_enabled():
            scores = qh @ kh.transpose(-2, -1)  # (B, nh, T, T)
            scores = scores.masked_fill_(future_mask(T, x.device), float("-inf"))
            pattern = self.hook_pattern(torch.softmax(scores, dim=-1))  # (B, nh, T, T)
            z = self.attn_dropout(pattern) @ vh  # (B, nh, T, hs)
        elif self.hook_pattern._forward_hooks or self.hook_pattern._forward_pre_hooks:
            # Someone reads (or edits) the whole pattern: build it, the same numbers row for row.
            pattern = self.hook_pattern(self._causal_pattern(qh, kh))  # (B, nh, T, T)
            z = pattern @ vh  # (B, nh, T, hs)
        else:
            z = self._attend_by_blocks(qh, kh, vh)  # (B, nh, T, hs), the pattern never whole
        z = self.hook_z(z.transpose(1, 2))  # (B, T, nh, hs)
        return self.resid_dropout(self.c_proj(z.reshape(B, T, C)))  # (B, T, C)

    def heads_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The per-head queries (scaled), keys and values the scores are made of, (B, nh, T, hs) each."""
        B, T, C = x.shape
        nh, hs = self.n_head, self.head_size
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = self.hook_q(q.view(B, T, nh, hs))  # (B, T, nh, hs)
        k = self.hook_k(k.view(B, T, nh, hs))  # (B, T, nh, hs)
        v = self.hook_v(v.view(B, T, nh, hs))  # (B, T, nh, hs)
        # Always the explicit product, even where nobody hooks the pattern: a fused kernel
        # rounds differently, and the session's cache mixes layers computed by capture and by
        # predict, so every path must produce the same numbers.
        # Scaling q before the product touches T*hs numbers instead of T*T.
        qh = q.transpose(1, 2) * (1.0 / math.sqrt(hs))  # (B, nh, T, hs)
        return qh, k.transpose(1, 2), v.transpose(1, 2)  # (B, nh, T, hs) each

    def pattern_rows(self, qh: torch.Tensor, kh: torch.Tensor, a: int, b: int,
                     out: torch.Tensor | None = None) -> torch.Tensor:
        """Query rows a..b-1 of the pattern against the keys they may see (0..b-1): (B, nh, b - a, b).

        The one place scores become probabilities; the forward and every recomputation call it
        with the same blocks (`query_blocks`), so a row computed later is the row the forward had.
        """
        scores = qh[:, :, a:b] @ kh[:, :, :b].transpose(-2, -1)  # (B, nh, b - a, b)
        # Only the diagonal square holds future keys; the columns before a are all visible.
        scores[..., a:b].masked_fill_(future_mask(b - a, qh.device), float("-inf"))
        return torch.softmax(scores, dim=-1, out=out) if out is not None else torch.softmax(scores, dim=-1)

    def _attend_by_blocks(self, qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor) -> torch.Tensor:
        """pattern @ v one block of query rows at a time: memory O(block x T), not O(T^2), per head.

        Each block is held against all T keys (zeros past the visible ones) so its product with
        v sums over the same T terms, in the same order, as the whole pattern's would.
        """
        B, nh, T, hs = vh.shape
        z = vh.new_empty(B, nh, T, hs)
        blocks = query_blocks(T)
        rows_buf = vh.new_zeros(B, nh, max(b - a for a, b in blocks), T)  # (B, nh, r, T)
        observe = self.pattern_rows_observer
        for a, b in blocks:
            rows = rows_buf[:, :, : b - a]  # (B, nh, b - a, T); columns >= b stay zero
            self.pattern_rows(qh, kh, a, b, out=rows[..., :b])
            if observe is not None:
                observe(a, rows[..., :b])
            z[:, :, a:b] = rows @ vh  # (B, nh, b - a, hs)
        return z

    def _causal_pattern(self, qh: torch.Tensor, kh: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T, masked) by blocks of queries, skipping the keys a block cannot see.

        Half the (T, T) products and softmax work at long prompts, and bit-for-bit the result
        of the full masked product: each score is the same 64-term dot product and each row's
        softmax the same reduction (the skipped keys would only add exact zeros). `out=` makes
        this no-grad only. Written into the attention workspace when one is set.
        """
        B, nh, T, _ = qh.shape
        shape = (B, nh, T, T)
        ws = self.workspace
        pattern = ws.scores(shape, qh) if ws is not None else qh.new_empty(shape)
        zeroed = ws is not None and ws.zero_above_diagonal == shape
        if ws is not None:
            ws.zero_above_diagonal = None  # until this pattern is complete
        for a, b in query_blocks(T):
            self.pattern_rows(qh, kh, a, b, out=pattern[:, :, a:b, :b])
            if not zeroed:
                pattern[:, :, a:b, b:].zero_()
        if ws is not None:
            ws.zero_above_diagonal = shape
        return pattern


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = Linear(config.n_embd, config.n_mlp, bias=config.bias)
        self.c_proj = Linear(config.n_mlp, config.n_embd, bias=config.bias)
        self.act = _ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)
        self.hook_pre = HookPoint()  # (B, T, n_mlp)
        self.hook_post = HookPoint()  # (B, T, n_mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.hook_pre(self.c_fc(x))
        post = self.hook_post(self.act(pre))
        return self.dropout(self.c_proj(post))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.mlp = MLP(config)
        self.hook_resid_pre = HookPoint()  # (B, T, C)
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.ln_1(x))))
        return self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd) if config.positional == "learned" else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps, bias=config.bias)
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.hook_embed = HookPoint()  # (B, T, C)
        self.hook_pos_embed = HookPoint()  # (B, T, C)
        self.hook_final = HookPoint()  # (B, T, C), after ln_f
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation, with its 1/sqrt(2 n_layer) scaling of residual projections."""
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * self.config.n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            else:
                nn.init.ones_(p)  # LayerNorm gains

    @property
    def n_params(self) -> int:
        """Parameters counted once (a tied head shares the embedding)."""
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> the residual stream entering block 0, (B, T, C)."""
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than block_size={self.config.block_size}")
        tok = self.hook_embed(self.wte(idx))  # (B, T, C)
        if self.wpe is not None:
            pos = self.wpe(torch.arange(T, device=idx.device))  # (T, C)
        else:
            pos = sinusoidal_positions(T, self.config.n_embd, device=idx.device, dtype=tok.dtype)
        pos = self.hook_pos_embed(pos.unsqueeze(0).expand(B, T, -1))  # (B, T, C)
        return self.drop(tok + pos)

    def run_blocks(self, x: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Run blocks start..stop-1 on a residual stream; lets a mask change resume mid-model."""
        for block in self.blocks[start:stop]:
            x = block(x)
        return x

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """Residual stream (..., C) -> logits (..., vocab_size) through ln_f and the head."""
        return self.lm_head(self.hook_final(self.ln_f(x)))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """nanoGPT's contract: logits (B, T, V), and the mean cross-entropy when targets are given."""
        logits = self.unembed(self.run_blocks(self.embed(idx)))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))  # (B*T, V)
        return logits, loss
