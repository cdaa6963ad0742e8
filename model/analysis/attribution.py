"""Direct logit attribution: how much each head's output, read straight through the final norm
and the unembedding, raises or lowers the logit of one token at one position.

A norm is linear once its scale is fixed: with the scale taken from the run at that position,
LayerNorm(x) = g * (x - mean(x)) / sigma + b with sigma the standard deviation, and RMSNorm(x)
= g * x / rms (Gemma's gain is 1 + w). The residual is the sum of what the embedding, each
head, each attention bias and each MLP wrote, so the token's logit splits into one term per
writer plus b . W_U[token]. A head's term is its "direct" effect: its write w_h = z_h W_O,h read
through the frozen final norm and W_U[token]. Where a norm also sits on the attention's output
(Gemma 2/3, OLMo 2), the heads' writes pass through that one too, its scale frozen in the same
way. Effects through later layers are not in it (a scan measures those). With a soft-capped head
(Gemma 2) the terms add up to the logit before the cap.

Under feature clamps a head's write is its output z_h before any clamp of z, from its real
inputs in the clamped run (earlier clamps are in the cached residual stream), through W_O; a
clamp of z is the clamp's addition, not the head's (`logit_attribution`'s "clamp" term), and
reaches the heads' terms only through the scale of the norm on the attention's output, which
saw it.

Each head's output at the position is recomputed from the session's cached residual stream of
that run (`masked_residuals`), one query row per layer: no forward over the whole prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from transformer_viewer.model.analysis.row_clamps import RowClamps, row_clamps
from transformer_viewer.model.capture.interventions import Intervention, requested
from transformer_viewer.model.decoder.norms import PlainLayerNorm, RMSNorm
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels.attention_kernels import attend_by_blocks, attend_rows


@dataclass(frozen=True)
class HeadAttribution:
    position: int
    token_id: int  # the token whose logit is split
    logit: float  # the model's logit of token_id at position (before any soft-cap: what the terms add up to)
    direct: np.ndarray  # (L, nh) float32, each head's direct effect on that logit
    mask: np.ndarray  # (L, nh) bool, heads ablated in the run (their effect is that of the ablated output)
    logit_cap: float = 0.0  # the model's final soft-cap (0: none); the shown probabilities are of capped logits


@dataclass(frozen=True)
class FrozenNorm:
    """A norm at one position with its scale fixed: x -> gain * (x - mean(x) if centred) / sigma + bias."""

    gain: torch.Tensor  # (C,)
    sigma: torch.Tensor  # ()
    centred: bool
    bias: torch.Tensor | None  # (C,)

    def linear(self, writes: torch.Tensor) -> torch.Tensor:
        """What writes (..., C) become through the norm, each on its own (the bias apart)."""
        if self.centred:
            writes = writes - writes.mean(dim=-1, keepdim=True)
        return writes * self.gain / self.sigma


def frozen_norm(norm: nn.Module, x: torch.Tensor) -> FrozenNorm:
    """`norm` at the input x (C,) it saw in the run, in float32."""
    x = x.float()
    ones = torch.ones_like(x)
    if isinstance(norm, RMSNorm):
        w = norm.weight.float()
        return FrozenNorm(1.0 + w if norm.offset else w, torch.sqrt(x.pow(2).mean() + norm.eps), False, None)
    if isinstance(norm, PlainLayerNorm):
        return FrozenNorm(ones, torch.sqrt(x.var(unbiased=False) + norm.eps), True, None)
    if isinstance(norm, nn.Identity):  # no norm there: the writes pass as they are
        return FrozenNorm(ones, torch.ones((), device=x.device), False, None)
    if isinstance(norm, nn.LayerNorm):
        gain = norm.weight.float() if norm.weight is not None else ones
        bias = norm.bias.float() if norm.bias is not None else None
        return FrozenNorm(gain, torch.sqrt(x.var(unbiased=False) + norm.eps), True, bias)
    raise ModelError(f"direct attribution cannot read through a {type(norm).__name__}")


@torch.inference_mode()
def head_attribution(session, position: int | None = None, token: int | None = None, intervention: Intervention | None = None,
                     mask=None, ablation: str | None = None, step: Callable[[int, int], None] | None = None) -> HeadAttribution:
    """Each head's direct effect on the logit of `token` (default: the top token) at `position`
    (default: the last), in a run of the session's prompt under `mask`. `step(layer, n_layer)`
    hears of each layer as it starts (and may raise to stop)."""
    change = requested(session.config, intervention, mask, ablation)  # a bare mask: made by Intervention.make
    mask, ablation = change.mask, change.ablation
    if session.tokens is None or not session.tokens.ids:
        raise ModelError("the prompt is empty; type some text first")
    model, c = session.model, session.config
    T = len(session.tokens.ids)
    p = T - 1 if position is None else int(position)
    if not 0 <= p < T:
        raise ModelError(f"position {position} is outside the prompt's {T} tokens")
    try:
        session.residuals()
    except ModelError:
        session.predict(None)  # fills the layer cache with one clean run
    resid = session.masked_residuals(change)  # resid_pre of each layer, then the last resid_post
    final = resid[-1][0, p]  # (C,)
    h = model.hook_final(model.ln_f(final))
    raw = model.lm_head(h).float()[: session.n_vocab]  # (V,): the logits before any soft-cap
    token = int(torch.argmax(raw)) if token is None else int(token)  # the cap keeps the order
    if not 0 <= token < session.n_vocab:
        raise ModelError(f"token id {token} is outside the vocabulary of {session.n_vocab}")
    readout = model.lm_head.weight[token].float()  # (C,)
    final_norm = frozen_norm(model.ln_f, final)
    clamps = row_clamps(session, change, p)  # by layer
    direct = np.empty((c.n_layer, c.n_head), dtype=np.float32)
    for layer in range(c.n_layer):
        if step is not None:
            step(layer, c.n_layer)
        writes = head_writes(model.blocks[layer], resid[layer], p, mask[layer], ablation,
                             clamps.get(layer))  # (nh, C)
        direct[layer] = (final_norm.linear(writes) @ readout).cpu().numpy()
    cap = float(c.logit_softcap or 0.0)
    return HeadAttribution(position=p, token_id=token, logit=float(raw[token]), direct=direct, mask=mask,
                           logit_cap=cap)


def head_writes(block, x: torch.Tensor, p: int, masked: np.ndarray, ablation: str,
                clamps: RowClamps | None = None) -> torch.Tensor:
    """What each head of `block` adds to the residual at position p, (nh, C) float32, from its
    resid_pre x (1, T, C): z_h W_O,h, through the frozen norm on the attention's output if the
    block has one; masked heads give their ablated output (zero, or their mean over positions).
    A clamp of the block's z is not the heads' (`clamp_z_writes`): it reaches their writes only
    through the norm's scale, which saw it."""
    z = head_z(block, x, p, masked, ablation)  # (nh, hs)
    writes = z_writes(block.attn, z)
    post = block.ln_post_attn
    if isinstance(post, nn.Identity):
        return writes
    bias = block.attn.c_proj.bias.float() if block.attn.c_proj.bias is not None else 0.0
    seen = writes.sum(dim=0) + bias  # the norm saw the heads' sum, and any clamp of z
    clamp = clamp_z_writes(block.attn, z, clamps)
    if clamp is not None:
        seen = seen + clamp.sum(dim=0)
    return frozen_norm(post, seen).linear(writes)


def raw_head_writes(block, x: torch.Tensor, p: int, masked: np.ndarray, ablation: str) -> torch.Tensor:
    """z_h W_O,h for each head of `block` at position p, (nh, C) float32, before any norm on the
    attention's output; masked heads give their ablated output."""
    return z_writes(block.attn, head_z(block, x, p, masked, ablation))


def head_z(block, x: torch.Tensor, p: int, masked: np.ndarray, ablation: str) -> torch.Tensor:
    """Each head's output z_h at position p, (nh, hs) in the model's dtype, from the block's
    resid_pre x (1, T, C), as hook_z holds it before any clamp: masked heads give their ablated
    output (zero, or their mean over positions)."""
    attn = block.attn
    mean_ablated = ablation == "mean" and masked.any()
    rows = x if mean_ablated else x[:, : p + 1]  # zero ablation is causal: nothing after p matters
    q, k, v = attn.heads_qkv(block.ln_1(rows))  # (1, nh, T', hs) each
    off = torch.tensor(masked, device=x.device)[:, None]  # (nh, 1); a copy: the mask is read-only
    if mean_ablated:  # the mean over every position of the masked heads' outputs
        z_all = attend_by_blocks(q, k, v, attn.window, attn.softcap)[0]  # (nh, T, hs)
        return torch.where(off, z_all.mean(dim=1), z_all[:, p])  # (nh, hs)
    z = attend_rows(q, k, v, p, attn.window, attn.softcap)[0, :, 0]  # (nh, hs)
    return torch.where(off, torch.zeros((), dtype=z.dtype, device=z.device), z)


def z_writes(attn, z: torch.Tensor) -> torch.Tensor:
    """z_h W_O,h for each head, (nh, C) float32, from the heads' outputs z (nh, hs)."""
    nh, hs = attn.n_head, attn.head_size
    w_o = attn.c_proj.weight.float()  # (C, nh * hs): out = z_flat @ w_o.T
    return torch.einsum("ni,nic->nc", z.float(), w_o.T.reshape(nh, hs, w_o.shape[0]))  # (nh, C)


def clamp_z_writes(attn, z: torch.Tensor, clamps: RowClamps | None) -> torch.Tensor | None:
    """What the clamps of hook_z add through W_O at the query row whose heads' outputs are z
    (nh, hs), per head (nh, C) float32 before any output norm; None without such a clamp."""
    if clamps is None or not clamps.has("attn.hook_z"):
        return None
    _edited, delta = clamps.edit("attn.hook_z", z[None, None])  # hook_z's (1, 1, nh, hs)
    return z_writes(attn, delta[0, 0])
