"""Complete direct logit attribution: every writer into the residual stream at one position, read
straight through the final norm and the unembedding, with terms that add up to the logit.

The residual stream that the final norm reads at position p is a sum of writes: the token
embedding, the learned or sinusoidal positions (where the model has them), and in each layer the
attention's output and the MLP's output. The attention's output is each head's write z_h W_O,h
plus the output projection's bias; where the family puts a norm on the sublayer's output (Gemma
2/3, OLMo 2) each write passes through that norm with its scale frozen at p, as the final norm's
is (`attribution.FrozenNorm`), and the norm's own bias goes with the attention's bias term. With
the scales frozen every norm is linear, so the logit of a token (or the difference of two
tokens' logits) splits exactly into

    embedding + positions + sum over layers of (heads + attention bias + MLP)
              + final norm's bias + unembedding's bias

before any final soft-cap. The split is the "direct" effect of each writer: what it adds to the
logit with everything else held fixed, not what it causes through later layers (patching and
head scans measure that).

**Feature clamps.** Under an Intervention's clamps each layer that applies one (a clamp of
blocks.L.hook_resid_pre is applied by layer L - 1, at its output) gets one more term, "clamp":
    embedding + positions + sum over layers of (heads + attention bias + MLP + clamps) + ...
Heads, the attention's bias and the MLP are each writer's own write computed from its real
inputs in the clamped run (the MLP reads a resid_mid that holds a clamp of the attention's
output or of z; a post-sublayer norm is frozen at what it saw, the clamp included), without the
clamp's own addition. The clamp term is the rest, every clamp of the layer together: a
residual-stream SAE's addition (resid_pre, resid_mid, resid_post, attn_out, mlp_out) read
through the frozen final norm; a z SAE's addition to the heads' outputs through W_O (and the
frozen norm on the attention's output, where the family has one); an mlp.hook_post SAE's
addition to the neurons through the MLP's output projection (and its output norm). The
additions at p come from the layer's clamp hooks applied to the activations of row p
(`row_clamps`): the same edit the clamped run made there. Without clamps there is no clamp
term and every number is what it is without SAEs.

Everything is recomputed from the session's cached residual stream of that run (the run under
the mask and clamps, `Session.masked_residuals`), one query row per layer: no forward over the
prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from transformer_viewer.model.analysis.attribution import (
    FrozenNorm,
    clamp_z_writes,
    frozen_norm,
    head_z,
    z_writes,
)
from transformer_viewer.model.analysis.row_clamps import RowClamps, added, edit_row, row_clamps
from transformer_viewer.model.capture.interventions import Intervention, requested
from transformer_viewer.model.decoder.gpt import ParallelBlock, sinusoidal_positions
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels.attention_kernels import pattern_rows

COMPONENTS = ("embedding", "position", "head", "attn_bias", "mlp", "clamp", "norm_bias", "unembed_bias")


@dataclass(frozen=True)
class LogitAttribution:
    """The direct effect of every writer on one logit (or logit difference) at one position."""

    position: int
    tokens: tuple[int, ...]  # (A,): A's logit; (A, B): logit(A) - logit(B)
    logit: float  # the model's logit (difference) before any final soft-cap: what the terms add up to
    embedding: float  # the token embedding (scaled, where the family scales it)
    position_term: float | None  # learned or sinusoidal positions; None where positions act inside attention
    heads: np.ndarray  # (L, nh) float32
    attn_bias: np.ndarray  # (L,) float32: the output projection's bias (and a post-norm's bias)
    mlp: np.ndarray  # (L,) float32: the MLP's whole write, its output bias included
    norm_bias: float  # the final norm's bias (0 for an RMSNorm)
    unembed_bias: float  # the unembedding's bias (lm_head.bias; 0 where there is none)
    mask: np.ndarray  # (L, nh) bool: heads ablated in the run
    ablation: str
    logit_cap: float = 0.0  # the model's final soft-cap (0: none)
    clamp: np.ndarray | None = None  # (L,) float32: what each layer's feature clamps added (zeros: none)
    clamped: tuple[int, ...] = ()  # the layers that apply a feature clamp: the only ones with a clamp term

    def __post_init__(self):
        if self.clamp is None:
            object.__setattr__(self, "clamp", np.zeros(self.heads.shape[0], dtype=np.float32))

    def total(self) -> float:
        """The sum of every term, in float64: equals `logit` within float32 rounding."""
        return sum(t["value"] for t in self.terms())

    def terms(self) -> list[dict]:
        """Every term as {"component", "layer", "head", "value"}, in the model's order."""
        out = [dict(component="embedding", layer=None, head=None, value=float(self.embedding))]
        if self.position_term is not None:
            out.append(dict(component="position", layer=None, head=None, value=float(self.position_term)))
        for layer in range(self.heads.shape[0]):
            out += [dict(component="head", layer=layer, head=h, value=float(v)) for h, v in enumerate(self.heads[layer])]
            out.append(dict(component="attn_bias", layer=layer, head=None, value=float(self.attn_bias[layer])))
            out.append(dict(component="mlp", layer=layer, head=None, value=float(self.mlp[layer])))
            if layer in self.clamped:
                out.append(dict(component="clamp", layer=layer, head=None, value=float(self.clamp[layer])))
        out.append(dict(component="norm_bias", layer=None, head=None, value=float(self.norm_bias)))
        out.append(dict(component="unembed_bias", layer=None, head=None, value=float(self.unembed_bias)))
        return out

    def top(self, n: int = 10) -> list[dict]:
        """The n terms of largest magnitude, each with its share of the sum of magnitudes."""
        terms = self.terms()
        scale = sum(abs(t["value"]) for t in terms) or 1.0
        ranked = sorted(terms, key=lambda t: -abs(t["value"]))[:n]
        return [dict(t, share=abs(t["value"]) / scale) for t in ranked]


@dataclass(frozen=True)
class Readout:
    """What turns a final residual into the logit (difference) being split."""

    final_norm: FrozenNorm
    direction: torch.Tensor  # (C,): W_U[A] (- W_U[B])
    bias: float  # lm_head.bias[A] (- lm_head.bias[B])

    def of(self, writes: torch.Tensor) -> torch.Tensor:
        """The direct effect of writes (..., C) through the frozen final norm, (...)."""
        return self.final_norm.linear(writes.float()) @ self.direction


def prepare(session, position: int | None, tokens, intervention, mask, ablation: str | None):
    """Checks shared by every direct-effect function: (intervention, p, residuals, tokens, raw
    logits)."""
    change = requested(session.config, intervention, mask, ablation)  # a bare mask: made by Intervention.make
    if session.tokens is None or not session.tokens.ids:
        raise ModelError("the prompt is empty; type some text first")
    p = session._position(position, len(session.tokens.ids))  # negative counts from the end
    try:
        session.residuals()
    except ModelError:
        session.predict(None)  # fills the layer cache with one clean run
    resid = session.masked_residuals(change)  # resid_pre of each layer, then the last resid_post
    model = session.model
    final = resid[-1][0, p]  # (C,)
    raw = model.lm_head(model.hook_final(model.ln_f(final))).float()[: session.n_vocab]  # (V,), before any cap
    tokens = (int(torch.argmax(raw)),) if not tokens else tuple(int(t) for t in tokens)
    if len(tokens) > 2:
        raise ModelError(f"give one token or a pair of tokens, not {len(tokens)}")
    for t in tokens:
        if not 0 <= t < session.n_vocab:
            raise ModelError(f"token id {t} is outside the vocabulary of {session.n_vocab}")
    return change, p, resid, tokens, raw


def readout_for(model, final: torch.Tensor, tokens: tuple[int, ...]) -> Readout:
    w = model.lm_head.weight
    direction = w[tokens[0]].float() - (w[tokens[1]].float() if len(tokens) == 2 else 0.0)
    b = model.lm_head.bias
    bias = 0.0
    if b is not None:
        bias = float(b[tokens[0]]) - (float(b[tokens[1]]) if len(tokens) == 2 else 0.0)
    return Readout(frozen_norm(model.ln_f, final), direction, bias)


@dataclass(frozen=True)
class BlockWrites:
    """What one block writes at one position, in float32, through any norms on its sublayers'
    outputs: the parts add up to resid_post - resid_pre there."""

    heads: torch.Tensor  # (nh, C): each head's z_h W_O,h, z before any clamp of it
    attn_bias: torch.Tensor  # (C,): the output projection's bias (and a post-norm's bias)
    mlp: torch.Tensor  # (C,): the MLP's output from its real input, without any clamp's addition
    clamp: torch.Tensor | None  # (C,): everything the block's clamps added; None without any


def block_writes(block, x: torch.Tensor, p: int, masked: np.ndarray, ablation: str,
                 clamps: RowClamps | None = None) -> BlockWrites:
    """What `block` writes at position p from its resid_pre x (1, T, C). The heads' writes and
    the bias pass through the frozen norm on the attention's output where the block has one, and
    add up to the attention's output; the MLP's write is its real output at p (through its own
    output norm). With `clamps` (the block's, at p) each writer reads its real input in the
    clamped run and the clamps' additions go to `clamp`, point by point as the block applies them."""
    z = head_z(block, x, p, masked, ablation)  # (nh, hs)
    heads, attn_bias, z_clamp = attention_writes(block, z, clamps)
    attn_out = heads.sum(dim=0) + attn_bias  # (C,)
    if z_clamp is not None:
        attn_out = attn_out + z_clamp
    attn_out, attn_clamp = edit_row(clamps, "hook_attn_out", attn_out)
    mid, mid_clamp = edit_row(clamps, "hook_resid_mid", x[0, p].float() + attn_out)  # (C,)
    if isinstance(block, ParallelBlock):  # both sublayers read the block's input
        mlp_in = block.ln_1(x[:, p:p + 1]) if isinstance(block.ln_2, nn.Identity) else block.ln_2(x[:, p:p + 1])
    else:  # the MLP reads resid_mid as the block had it, clamps included
        mlp_in = block.ln_2(mid.to(x.dtype)[None, None])  # (1, 1, C)
    mlp, neurons_clamp = mlp_writes(block, mlp_in, clamps)
    mlp_out = mlp if neurons_clamp is None else mlp + neurons_clamp
    mlp_out, out_clamp = edit_row(clamps, "hook_mlp_out", mlp_out)
    _post, post_clamp = edit_row(clamps, "hook_resid_post", mid + mlp_out)
    clamp = added(z_clamp, attn_clamp, mid_clamp, neurons_clamp, out_clamp, post_clamp)
    return BlockWrites(heads, attn_bias, mlp, clamp)


def attention_writes(block, z: torch.Tensor, clamps: RowClamps | None):
    """(heads (nh, C), attention bias (C,), the clamps of z through W_O (C,) or None) from the
    heads' outputs z (nh, hs) at the query row: through the frozen norm on the attention's
    output where the block has one, which saw all three."""
    raw = z_writes(block.attn, z)  # (nh, C)
    z_clamp = clamp_z_writes(block.attn, z, clamps)  # (nh, C) or None
    z_clamp = None if z_clamp is None else z_clamp.sum(dim=0)  # (C,)
    bias = block.attn.c_proj.bias
    bias = bias.float() if bias is not None else torch.zeros(raw.shape[1], device=raw.device)
    post = block.ln_post_attn
    if isinstance(post, nn.Identity):
        return raw, bias, z_clamp
    # The norm saw the heads' sum plus the bias (and the clamp): each part through it, the norm's own bias with the bias.
    seen = raw.sum(dim=0) + bias
    frozen = frozen_norm(post, seen if z_clamp is None else seen + z_clamp)
    attn_bias = frozen.linear(bias) + (frozen.bias if frozen.bias is not None else 0.0)
    return frozen.linear(raw), attn_bias, None if z_clamp is None else frozen.linear(z_clamp)


def mlp_writes(block, mlp_in: torch.Tensor, clamps: RowClamps | None):
    """(the MLP's write (C,), the clamps of its neurons through c_proj (C,) or None) from its
    input mlp_in (1, 1, C), each through the frozen norm on the MLP's output where the block has
    one (the norm saw both)."""
    if clamps is None or not clamps.has("mlp.hook_post"):
        return block.ln_post_mlp(block.mlp(mlp_in))[0, 0].float(), None
    seen = {}

    def clamp_neurons(_point, _inputs, post):  # (1, 1, n_mlp)
        edited, seen["delta"] = clamps.edit("mlp.hook_post", post)
        return edited

    with hooks(block, [("mlp.hook_post", clamp_neurons)]):
        out = block.mlp(mlp_in)[0, 0].float()  # (C,): c_proj of the clamped neurons, its bias included
    neurons = seen["delta"][0, 0].float() @ block.mlp.c_proj.weight.float().T  # (C,): no bias, only the change
    own = out - neurons
    post = block.ln_post_mlp
    if isinstance(post, nn.Identity):
        return own, neurons
    frozen = frozen_norm(post, out)
    return frozen.linear(own) + (frozen.bias if frozen.bias is not None else 0.0), frozen.linear(neurons)


def embedding_writes(model, ids: torch.Tensor, p: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token embedding and the positions' write at p, (C,) each (positions None where
    they act inside attention), as `GPT.embed` adds them."""
    tok = model.wte(ids[:, p:p + 1])[0, 0]  # (C,)
    if model.embed_scale != 1.0:
        tok = tok * torch.tensor(model.embed_scale, dtype=tok.dtype)
    positional = model.config.positional
    if positional == "learned":
        return tok.float(), model.wpe.weight[p].float()
    if positional == "sinusoidal":
        table = sinusoidal_positions(p + 1, model.config.n_embd, device=ids.device, dtype=tok.dtype)
        return tok.float(), table[p].float()
    return tok.float(), None


@torch.inference_mode()
def logit_attribution(session, position: int | None = None, tokens=None, intervention: Intervention | None = None,
                      mask=None, ablation: str | None = None,
                      step: Callable[[int, int], None] | None = None) -> LogitAttribution:
    """Every writer's direct effect on the logit of tokens[0] (minus tokens[1]'s, for a pair) at
    `position` (default: the last; negative counts from the end), in the session's run under `mask`. `tokens` None: the top
    token. `step(layer, n_layer)` hears of each layer as it starts (and may raise to stop)."""
    change, p, resid, tokens, raw = prepare(session, position, tokens, intervention, mask, ablation)
    mask, ablation = change.mask, change.ablation
    model, c = session.model, session.config
    readout = readout_for(model, resid[-1][0, p], tokens)
    ids = torch.tensor([session.tokens.ids], device=resid[0].device)
    tok, pos = embedding_writes(model, ids, p)
    heads = np.empty((c.n_layer, c.n_head), dtype=np.float32)
    attn_bias = np.empty(c.n_layer, dtype=np.float32)
    mlp = np.empty(c.n_layer, dtype=np.float32)
    clamp = np.zeros(c.n_layer, dtype=np.float32)
    clamps = row_clamps(session, change, p)  # by layer
    for layer in range(c.n_layer):
        if step is not None:
            step(layer, c.n_layer)
        w = block_writes(model.blocks[layer], resid[layer], p, mask[layer], ablation, clamps.get(layer))
        heads[layer] = readout.of(w.heads).cpu().numpy()
        attn_bias[layer] = float(readout.of(w.attn_bias))
        mlp[layer] = float(readout.of(w.mlp))
        if w.clamp is not None:
            clamp[layer] = float(readout.of(w.clamp))
    norm_bias = float(readout.final_norm.bias @ readout.direction) if readout.final_norm.bias is not None else 0.0
    logit = float(raw[tokens[0]]) - (float(raw[tokens[1]]) if len(tokens) == 2 else 0.0)
    return LogitAttribution(
        position=p, tokens=tokens, logit=logit, embedding=float(readout.of(tok)),
        position_term=None if pos is None else float(readout.of(pos)), heads=heads, attn_bias=attn_bias, mlp=mlp,
        norm_bias=norm_bias, unembed_bias=readout.bias, mask=mask, ablation=ablation,
        logit_cap=float(c.logit_softcap or 0.0), clamp=clamp, clamped=tuple(sorted(clamps)))


@torch.inference_mode()
def head_sources(session, layer: int, head: int, position: int | None = None, tokens=None,
                 intervention: Intervention | None = None, mask=None, ablation: str | None = None) -> np.ndarray:
    """Head (layer, head)'s direct effect split by the key position it read, (p + 1,) float32,
    summing to the head's term in `logit_attribution`: its write at p is sum over k of
    pattern[p, k] * v_k W_O,h, each part read through the same frozen norms.

    A zero-ablated head moves nothing (all zeros). A mean-ablated head writes its mean output
    over every query position, so its parts are the pattern's column means over all queries
    (keys past p included: the mean reads the whole prompt)."""
    change, p, resid, tokens, _raw = prepare(session, position, tokens, intervention, mask, ablation)
    mask, ablation = change.mask, change.ablation
    model, c = session.model, session.config
    if not (0 <= layer < c.n_layer and 0 <= head < c.n_head):
        raise ModelError(f"head {layer}.{head} is not in this model's {c.n_layer} layers x {c.n_head} heads")
    readout = readout_for(model, resid[-1][0, p], tokens)
    block, x = model.blocks[layer], resid[layer]
    attn = block.attn
    masked = bool(mask[layer, head])
    if masked and ablation == "zero":
        return np.zeros(p + 1, dtype=np.float32)
    mean_ablated = masked and ablation == "mean"
    rows = x if mean_ablated else x[:, : p + 1]
    qh, kh, vh = attn.heads_qkv(block.ln_1(rows))  # (1, nh, T', hs) each
    if mean_ablated:  # column means of the whole pattern, one block of query rows at a time
        T = rows.shape[1]
        weights = torch.zeros(T, dtype=torch.float32, device=x.device)
        for a in range(0, T, 256):
            b = min(T, a + 256)
            weights[:b] += pattern_rows(qh, kh, a, b, attn.window, attn.softcap)[0, head].float().sum(dim=0)  # (b,)
        weights /= T
    else:
        weights = pattern_rows(qh, kh, p, p + 1, attn.window, attn.softcap)[0, head, 0].float()  # (p + 1,)
    hs = attn.head_size
    w_o = attn.c_proj.weight.float()[:, head * hs:(head + 1) * hs]  # (C, hs)
    parts = (weights[:, None] * vh[0, head].float()) @ w_o.T  # (T', C): pattern[p, k] * v_k W_O,h
    # The frozen norm on the attention's output, if any, as the whole layer saw it at p.
    post = block.ln_post_attn
    if not isinstance(post, nn.Identity):
        z = head_z(block, x, p, mask[layer], ablation)  # (nh, hs)
        bias = attn.c_proj.bias.float() if attn.c_proj.bias is not None else 0.0
        seen = z_writes(attn, z).sum(dim=0) + bias
        z_clamp = clamp_z_writes(attn, z, row_clamps(session, change, p).get(layer))  # the norm saw it too
        parts = frozen_norm(post, seen if z_clamp is None else seen + z_clamp.sum(dim=0)).linear(parts)
    return readout.of(parts).cpu().numpy().astype(np.float32)
