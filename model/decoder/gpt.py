"""A decoder-only transformer written out in full: pre-norm blocks, explicit causal attention,
an MLP, positions. GPT-2 by default; the other families (Llama, Qwen, Mistral, Gemma, Phi,
OLMo, Pythia, GPT-J) are the same decoder with small named pieces swapped in by the config:
a norm (`norms.py`), a rotary embedding (`rotary.py`), a gated MLP, a parallel block, grouped
key/value heads, a sliding window, soft-capping. Parameter names follow GPT-2 / nanoGPT
(`c_attn`, `c_proj`, `c_fc`, `ln_1`, ...) so checkpoints map onto it with few renames.

Every activation passes through a named HookPoint; capture and head masks work by hooking
those, so this file knows nothing about either. This is the one path training and a plain
`GPT.forward` run. The app's inference runs faster kernels of the same arithmetic, installed
on a loaded model by its Session from `model/kernels/` (`install_inference`), never chosen here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.hooks import HookPoint
from transformer_viewer.model.decoder.norms import FlatRMSNorm, RMSNorm, make_norm
from transformer_viewer.model.decoder.rotary import Rotary

_ACTIVATIONS = {
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's "gelu_new"
    "gelu": F.gelu,  # exact erf GELU, as nanoGPT
    "relu": F.relu,
    "silu": F.silu,  # SwiGLU's gate (Llama)
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


class Softcap(nn.Module):
    """cap * tanh(x / cap): logits squashed smoothly into (-cap, cap) (Gemma 2)."""

    def __init__(self, cap: float):
        super().__init__()
        self.cap = cap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x / self.cap) * self.cap


def qk_norm(config: GPTConfig, heads: int) -> nn.Module:
    """The norm of queries or keys: none, per head (Qwen3, Gemma 3), or over all heads at once (OLMo 2)."""
    if config.qk_norm == "head":
        return make_norm(config, config.head_size)
    if config.qk_norm == "all":
        return FlatRMSNorm(heads * config.head_size, config.layer_norm_eps)
    return nn.Identity()


def rotary_for(config: GPTConfig, layer: int) -> nn.Module:
    """This layer's rotary embedding; sliding layers may have their own unscaled base (Gemma 3),
    and some layers none at all (SmolLM3's NoPE layers)."""
    if config.positional != "rotary" or layer in config.nope_layers:
        return nn.Identity()
    if config.rope_local_base and config.layer_is_sliding(layer):
        return Rotary(config, config.rope_local_base, "none")
    return Rotary(config, config.rope_base, config.rope_scaling)


def hidden_keys(T: int, window: int, device) -> torch.Tensor:
    """(T, T) bool, True where a query may not see a key: the future, and with a sliding
    window (0: none) the keys `window` or more positions back."""
    hidden = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)  # (T, T), above the diagonal
    if window:
        hidden |= torch.ones(T, T, dtype=torch.bool, device=device).tril(-window)
    return hidden


def attention_pattern(qh: torch.Tensor, kh: torch.Tensor, window: int, softcap: float) -> torch.Tensor:
    """softmax over the visible keys of the (soft-capped) scores of queries qh against keys kh,
    (B, nh, T, T); `window` 0 sees every earlier key, `softcap` 0 caps nothing."""
    T = qh.shape[2]
    scores = qh @ kh.transpose(-2, -1)  # (B, nh, T, T)
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap  # Gemma 2
    scores = scores.masked_fill(hidden_keys(T, window, qh.device), float("-inf"))
    return torch.softmax(scores, dim=-1)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_size = config.n_head, config.kv_heads, config.head_size
        nh, nkv, hs = self.n_head, self.n_kv_head, self.head_size
        self.c_attn = nn.Linear(config.n_embd, (nh + 2 * nkv) * hs, bias=config.uses_bias("qkv"))  # q, k, v stacked
        self.c_proj = nn.Linear(nh * hs, config.n_embd, bias=config.uses_bias("proj"))
        self.q_norm, self.k_norm = qk_norm(config, nh), qk_norm(config, nkv)
        self.rotary = rotary_for(config, layer)
        self.scale = config.attn_scale or 1.0 / math.sqrt(hs)
        self.softcap = config.attn_softcap  # 0: off
        self.window = config.sliding_window if config.layer_is_sliding(layer) else 0  # 0: every earlier key
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.hook_q = HookPoint()  # (B, T, nh, hs), after any QK-norm, before rotary
        self.hook_k = HookPoint()  # (B, T, nkv, hs)
        self.hook_v = HookPoint()  # (B, T, nkv, hs)
        self.hook_rot_q = HookPoint()  # (B, T, nh, hs), after rotary (= hook_q without it)
        self.hook_rot_k = HookPoint()  # (B, T, nkv, hs)
        self.hook_pattern = HookPoint()  # (B, nh, T, T), rows are queries
        self.hook_z = HookPoint()  # (B, T, nh, hs), per-head outputs before c_proj

    def forward(self, x: torch.Tensor, first_row: int = 0) -> torch.Tensor:
        """(B, T, C) -> (B, T - first_row, C): the outputs of query rows first_row.. (a
        prediction needs only the last row of the last layer; every key and value is still read)."""
        B, T, _ = x.shape
        qh, kh, vh = self.heads_qkv(x)  # (B, nh, T, hs) each
        pattern = self.hook_pattern(attention_pattern(qh, kh, self.window, self.softcap))  # (B, nh, T, T)
        z = self.attn_dropout(pattern) @ vh  # (B, nh, T, hs)
        z = self.hook_z(z[:, :, first_row:].transpose(1, 2))  # (B, T - first_row, nh, hs)
        return self.resid_dropout(self.c_proj(z.reshape(B, T - first_row, self.n_head * self.head_size)))

    def heads_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The queries (scaled), keys and values the pattern is made of, (B, nh, T, hs) each,
        key/value heads already shared out to the query heads they serve."""
        B, T, _ = x.shape
        nh, nkv, hs = self.n_head, self.n_kv_head, self.head_size
        q, k, v = self.c_attn(x).split([nh * hs, nkv * hs, nkv * hs], dim=2)
        q = self.hook_q(self.q_norm(q.view(B, T, nh, hs)))  # (B, T, nh, hs)
        k = self.hook_k(self.k_norm(k.view(B, T, nkv, hs)))  # (B, T, nkv, hs)
        v = self.hook_v(v.view(B, T, nkv, hs))  # (B, T, nkv, hs)
        q = self.hook_rot_q(self.rotary(q))
        k = self.hook_rot_k(self.rotary(k))
        # Always the explicit product, never a fused attention kernel: the pattern is what this
        # model shows, and every path (training, capture, prediction) must produce the same numbers.
        # Scaling q before the product touches T*hs numbers instead of T*T.
        qh = q.transpose(1, 2) * self.scale  # (B, nh, T, hs)
        kh = share_kv_heads(k.transpose(1, 2), nh)  # (B, nh, T, hs)
        vh = share_kv_heads(v.transpose(1, 2), nh)  # (B, nh, T, hs)
        return qh, kh, vh


def share_kv_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(B, nkv, T, hs) -> (B, nh, T, hs): each key/value head serves n_head / nkv query heads in a row."""
    group = n_head // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.n_mlp, bias=config.uses_bias("mlp"))
        self.c_proj = nn.Linear(config.n_mlp, config.n_embd, bias=config.uses_bias("mlp"))
        self.activation, self.act = config.activation, _ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)
        self.hook_pre = HookPoint()  # (B, T, n_mlp)
        self.hook_post = HookPoint()  # (B, T, n_mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        post = self.act(self.hook_pre(self.c_fc(x)))  # (B, T, n_mlp)
        return self.dropout(self.c_proj(self.hook_post(post)))


class GatedMLP(nn.Module):
    """act(x W_gate) * (x W_up), then down (SwiGLU with SiLU, GeGLU with tanh-GELU).
    Gate and up are one stacked matrix, c_fc = [W_gate; W_up]: one product for both."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_mlp = config.n_mlp
        self.c_fc = nn.Linear(config.n_embd, 2 * config.n_mlp, bias=config.uses_bias("mlp"))
        self.c_proj = nn.Linear(config.n_mlp, config.n_embd, bias=config.uses_bias("mlp"))
        self.activation, self.act = config.activation, _ACTIVATIONS[config.activation]
        self.dropout = nn.Dropout(config.dropout)
        self.hook_pre = HookPoint()  # (B, T, n_mlp), the gate before its activation
        self.hook_pre_linear = HookPoint()  # (B, T, n_mlp), the up projection
        self.hook_post = HookPoint()  # (B, T, n_mlp), act(gate) * up: the neurons c_proj reads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.c_fc(x).split(self.n_mlp, dim=-1)  # (B, T, n_mlp) each
        post = self.act(self.hook_pre(gate)) * self.hook_pre_linear(up)
        return self.dropout(self.c_proj(self.hook_post(post)))


def maybe_norm(config: GPTConfig, placed: bool) -> nn.Module:
    return make_norm(config) if placed else nn.Identity()


class Block(nn.Module):
    """x + attn(ln_1(x)), then + mlp(ln_2(.)). Norms on the sublayers' outputs as well with
    norm_placement "sandwich" (Gemma 2/3), instead of their inputs with "post" (OLMo 2)."""

    def __init__(self, config: GPTConfig, layer: int = 0):
        super().__init__()
        pre, post = config.norm_placement != "post", config.norm_placement != "pre"
        self.ln_1 = maybe_norm(config, pre)
        self.attn = CausalSelfAttention(config, layer)
        self.ln_post_attn = maybe_norm(config, post)
        self.ln_2 = maybe_norm(config, pre and config.block != "parallel_shared_norm")
        self.mlp = GatedMLP(config) if config.mlp == "gated" else MLP(config)
        self.ln_post_mlp = maybe_norm(config, post)
        self.hook_resid_pre = HookPoint()  # (B, T, C)
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, x: torch.Tensor, first_row: int = 0) -> torch.Tensor:
        """(B, T, C) -> (B, T - first_row, C): rows first_row.. of the output."""
        x = self.hook_resid_pre(x)
        attn = self.hook_attn_out(self.ln_post_attn(self.attn(self.ln_1(x), first_row)))
        x = self.hook_resid_mid(x[:, first_row:] + attn)
        return self.hook_resid_post(x + self.hook_mlp_out(self.ln_post_mlp(self.mlp(self.ln_2(x)))))


class ParallelBlock(Block):
    """x + attn(ln_1(x)) + mlp(ln_2(x)): both sublayers read the block's input (GPT-NeoX,
    GPT-J). With one shared norm (GPT-J) the MLP reads ln_1(x) too. resid_mid is x + attn."""

    def forward(self, x: torch.Tensor, first_row: int = 0) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        h = self.ln_1(x)
        mlp_in = h if isinstance(self.ln_2, nn.Identity) else self.ln_2(x)
        mid = self.hook_resid_mid(x[:, first_row:] + self.hook_attn_out(self.ln_post_attn(self.attn(h, first_row))))
        return self.hook_resid_post(mid + self.hook_mlp_out(self.ln_post_mlp(self.mlp(mlp_in[:, first_row:]))))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd) if config.positional == "learned" else None
        self.embed_scale = math.sqrt(config.n_embd) if config.embed_scale else 1.0
        self.drop = nn.Dropout(config.dropout)
        block = Block if config.block == "sequential" else ParallelBlock
        self.blocks = nn.ModuleList(block(config, layer) for layer in range(config.n_layer))
        self.ln_f = make_norm(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.cap_logits = Softcap(config.logit_softcap) if config.logit_softcap else nn.Identity()
        if config.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.hook_embed = HookPoint()  # (B, T, C), scaled when embed_scale
        self.hook_pos_embed = HookPoint()  # (B, T, C)
        self.hook_final = HookPoint()  # (B, T, C), after ln_f
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation, with its 1/sqrt(2 n_layer) scaling of residual projections."""
        offset_norms = {id(m.weight) for m in self.modules() if isinstance(m, RMSNorm) and m.offset}
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * self.config.n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith(".bias") or id(p) in offset_norms:
                nn.init.zeros_(p)  # an offset norm's gain is 1 + w
            else:
                nn.init.ones_(p)  # norm gains

    @property
    def n_params(self) -> int:
        """Parameters counted once (a tied head shares the embedding)."""
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> the residual stream entering block 0, (B, T, C)."""
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than block_size={self.config.block_size}")
        tok = self.wte(idx)  # (B, T, C)
        if self.embed_scale != 1.0:
            tok = tok * torch.tensor(self.embed_scale, dtype=tok.dtype)  # rounded to the weights' dtype, as Gemma
        tok = self.hook_embed(tok)
        if self.config.positional == "learned":
            pos = self.wpe(torch.arange(T, device=idx.device))  # (T, C)
        elif self.config.positional == "sinusoidal":
            pos = sinusoidal_positions(T, self.config.n_embd, device=idx.device, dtype=tok.dtype)
        else:
            return self.drop(tok)  # rotary positions act inside attention; "none" has none
        pos = self.hook_pos_embed(pos.unsqueeze(0).expand(B, T, -1))  # (B, T, C)
        return self.drop(tok + pos)

    def run_blocks(self, x: torch.Tensor, start: int = 0, stop: int | None = None, last_only: bool = False) -> torch.Tensor:
        """Run blocks start..stop-1 on a residual stream; lets a mask change resume mid-model.
        `last_only` (no grad): the last block computes the last position alone, (B, 1, C)."""
        blocks = self.blocks[start:stop]
        for i, block in enumerate(blocks):
            x = block(x, x.shape[1] - 1 if last_only and i == len(blocks) - 1 else 0)
        return x[:, -1:] if last_only else x

    def unembed(self, x: torch.Tensor) -> torch.Tensor:
        """Residual stream (..., C) -> logits (..., vocab_size) through ln_f and the head."""
        return self.cap_logits(self.lm_head(self.hook_final(self.ln_f(x))))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """nanoGPT's contract: logits (B, T, V), and the mean cross-entropy when targets are given."""
        logits = self.unembed(self.run_blocks(self.embed(idx)))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))  # (B*T, V)
        return logits, loss
