"""Direct logit attribution: how much each head's output, read straight through the final
LayerNorm and the unembedding, raises or lowers the logit of one token at one position.

The final LayerNorm is linear once its scale is fixed: with sigma the standard deviation of
the final residual at that position (taken from the run), LN(x) = g * (x - mean(x)) / sigma + b.
The residual is the sum of what the embedding, each head, each attention bias and each MLP
wrote, so the token's logit splits into one term per writer plus b . W_U[token]. A head's
term is its "direct" effect: g * (w_h - mean(w_h)) / sigma . W_U[token], with w_h = z_h W_O,h.
Effects through later layers are not in it (a scan measures those).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.hooks import caching, hooks
from transformer_viewer.model.interventions import check_intervention, head_mask_hooks


@dataclass(frozen=True)
class HeadAttribution:
    position: int
    token_id: int  # the token whose logit is split
    logit: float  # the model's logit of token_id at position
    direct: np.ndarray  # (L, nh) float32, each head's direct effect on that logit
    mask: np.ndarray  # (L, nh) bool, heads ablated in the run (their effect is that of the ablated output)


@torch.inference_mode()
def head_attribution(session, position: int | None = None, token: int | None = None, mask=None,
                     ablation: str = "zero") -> HeadAttribution:
    """Each head's direct effect on the logit of `token` (default: the top token) at `position`
    (default: the last), in a run of the session's prompt under `mask`."""
    mask = check_intervention(session.config, mask, ablation)
    if session.tokens is None or not session.tokens.ids:
        raise ModelError("the prompt is empty; type some text first")
    model, c = session.model, session.config
    ids = torch.tensor([session.tokens.ids], dtype=torch.long, device=session.device)  # (1, T)
    T = ids.shape[1]
    p = T - 1 if position is None else int(position)
    if not 0 <= p < T:
        raise ModelError(f"position {position} is outside the prompt's {T} tokens")
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(c.n_layer)]
    with hooks(model, head_mask_hooks(mask, ablation)), caching(model, names) as z:
        final = model.run_blocks(model.embed(ids))[0, p]  # (C,)
    logits = model.unembed(final).float()[: session.n_vocab]  # (V,)
    token = int(torch.argmax(logits)) if token is None else int(token)
    if not 0 <= token < session.n_vocab:
        raise ModelError(f"token id {token} is outside the vocabulary of {session.n_vocab}")
    ln = model.ln_f
    sigma = torch.sqrt(final.float().var(unbiased=False) + ln.eps)
    gain = ln.weight.float() if ln.weight is not None else torch.ones_like(final, dtype=torch.float32)
    readout = gain * model.lm_head.weight[token].float() / sigma  # (C,): what one unit written in each direction adds
    direct = np.empty((c.n_layer, c.n_head), dtype=np.float32)
    for layer, name in enumerate(names):
        w_o = model.blocks[layer].attn.c_proj.weight.float()  # (C, C): out = z_flat @ w_o.T
        w_heads = w_o.T.reshape(c.n_head, c.head_size, c.n_embd)  # (nh, hs, C)
        writes = torch.einsum("ni,nic->nc", z[name][0, p].float(), w_heads)  # (nh, C)
        writes = writes - writes.mean(dim=-1, keepdim=True)  # LayerNorm removes each write's mean
        direct[layer] = (writes @ readout).cpu().numpy()
    return HeadAttribution(position=p, token_id=token, logit=float(logits[token]), direct=direct, mask=mask)
