"""What an attached SAE reads in a prompt's run: each token's top features, one feature's row,
its direct effect on the logits and its share of a token's reconstruction, and the layer's
overview through the SAE (L0, fraction of variance unexplained, next-token KL with the
reconstruction spliced in).

Every function starts from the session's cached residual stream of the run under
`intervention` (`Session.sae_activation`: no forward over the layers before the SAE's) and
encodes a block of positions at a time, so a long prompt never holds (T, d_sae) at once: the
per-token lists keep the top k, O(T k); a feature's whole row is computed when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.analysis.attribution import frozen_norm
from transformer_viewer.model.capture.interventions import Intervention, requested
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sae.loading import past_context

BLOCK_BYTES = 64 << 20  # one block of positions' (rows, d_sae) float32 features
LOGIT_ROWS = 64  # positions unembedded at once for the KL


@dataclass(frozen=True)
class TokenFeatures:
    """Each token's top features, highest first: ids -1 (activation 0) where fewer fire."""

    ids: np.ndarray  # (T, k) int32
    acts: np.ndarray  # (T, k) float32
    sae_index: int
    hook: str
    bos_left_out: bool  # the first token is BOS and its row is left empty
    warning: str | None = None  # the prompt runs past the SAE's training context


@dataclass(frozen=True)
class LogitEffect:
    """A feature's decoder direction through the final norm (its scale frozen at `position`'s
    run) and the unembedding: the tokens whose logits one unit of activation raises most and
    lowers most. The frozen-scale approximation: the norm's scale is the run's, not what adding
    the direction would make it; effects through later layers are not in it."""

    feature: int
    position: int
    promoted_ids: np.ndarray  # (top,) int64
    promoted_values: np.ndarray  # (top,) float32, logit change per unit of activation
    suppressed_ids: np.ndarray  # (top,) int64
    suppressed_values: np.ndarray  # (top,) float32, most negative first


@dataclass(frozen=True)
class SaeOverview:
    """The layer through the SAE in this run."""

    l0: np.ndarray  # (T,) int32, features firing at each token
    fvu: float  # fraction of variance unexplained by the reconstruction (BOS left out when asked)
    kl: float  # mean over tokens of KL(run || run with the reconstruction spliced in), nats
    kl_per_token: np.ndarray  # (T,) float32


def _encoded_blocks(session, sae_index: int, intervention):
    """(start, features (n, d_sae), stats, SAE input (n, d_in)) block by block over positions."""
    sae = session.sae(sae_index)
    x = session.sae_activation(sae_index, intervention)[0]  # (T, ...)
    step = max(1, BLOCK_BYTES // (4 * sae.config.d_sae))
    for start in range(0, x.shape[0], step):
        inputs = sae.input(x[start:start + step])  # (n, d_in)
        a, stats = sae.module.encode_with_stats(inputs)
        yield start, a, stats, inputs


def _top_blocks(session, sae_index: int, intervention, top: int):
    """(values, ids) (n, top), highest first, block by block over positions, never the dense features."""
    sae = session.sae(sae_index)
    x = session.sae_activation(sae_index, intervention)[0]  # (T, ...)
    step = max(1, BLOCK_BYTES // (4 * sae.config.d_sae))
    for start in range(0, x.shape[0], step):
        yield sae.module.top_features(sae.input(x[start:start + step]), top)


def _bos(session, skip_bos: bool) -> bool:
    tok = session.tokens
    return bool(skip_bos and tok is not None and tok.special and tok.special[0])


@torch.inference_mode()
def token_features(session, sae_index: int, top: int = 10, intervention: Intervention | None = None,
                   skip_bos: bool = True) -> TokenFeatures:
    """Each token's `top` most active features of SAE `sae_index` in the run under `intervention`;
    with `skip_bos` (the default) a BOS token's row is left empty (its features dwarf the rest)."""
    sae = session.sae(sae_index)
    top = int(top)
    if not 1 <= top <= sae.config.d_sae:
        raise ModelError(f"--top must be from 1 to the SAE's {sae.config.d_sae:,} features, got {top}")
    id_blocks, act_blocks = [], []
    for values, index in _top_blocks(session, sae_index, intervention, top):  # (n, top) each, highest first
        firing = values > 0
        id_blocks.append(torch.where(firing, index, -1).to(torch.int32).cpu().numpy())
        act_blocks.append(torch.where(firing, values, 0).float().cpu().numpy())
    ids, acts = np.concatenate(id_blocks), np.concatenate(act_blocks)
    T = ids.shape[0]
    bos = _bos(session, skip_bos)
    if bos:
        ids[0], acts[0] = -1, 0.0
    return TokenFeatures(ids, acts, sae_index, sae.config.hook, bos, past_context(sae.config, T))


@torch.inference_mode()
def feature_row(session, sae_index: int, feature: int, intervention: Intervention | None = None) -> np.ndarray:
    """(T,) float32: feature `feature`'s activation at every token of the run."""
    _check_feature(session, sae_index, feature)
    parts = [a[:, feature].float().cpu().numpy() for _s, a, _st, _x in _encoded_blocks(session, sae_index, intervention)]
    return np.concatenate(parts).astype(np.float32)


@torch.inference_mode()
def reconstruction_share(session, sae_index: int, feature: int, position: int,
                         intervention: Intervention | None = None) -> float:
    """Feature `feature`'s share of the reconstruction at token `position`: its activation times
    its decoder norm over the sum of those of every feature (0 where nothing fires)."""
    _check_feature(session, sae_index, feature)
    sae = session.sae(sae_index)
    x = session.sae_activation(sae_index, intervention)[0]
    p = session._position(position, x.shape[0])
    a = sae.module.encode(sae.input(x[p]))  # (d_sae,)
    weighted = a * sae.module.decoder_norms()
    total = float(weighted.sum())
    return float(weighted[feature]) / total if total > 0 else 0.0


@torch.inference_mode()
def feature_logit_effect(session, sae_index: int, feature: int, top: int = 10, position: int | None = None,
                         intervention: Intervention | None = None) -> LogitEffect:
    """The direct effect of feature `feature`'s decoder direction on the logits, through the
    final norm with its scale frozen at `position` (default the last token) and the unembedding:
    the `top` tokens promoted and suppressed most (see `LogitEffect` for the approximation)."""
    _check_feature(session, sae_index, feature)
    model = session.model
    direction = residual_direction(session, sae_index, feature)  # (C,)
    final = session.residuals_under(requested(session.config, intervention))[-1][0]  # (T, C)
    p = session._position(position, final.shape[0])
    through = frozen_norm(model.ln_f, final[p]).linear(direction)  # (C,)
    effect = (model.lm_head.weight[: session.n_vocab].float() @ through).cpu()  # (V,)
    top = max(1, min(int(top), effect.numel()))
    up, down = torch.topk(effect, top), torch.topk(-effect, top)
    return LogitEffect(int(feature), p, up.indices.numpy().astype(np.int64), up.values.numpy().astype(np.float32),
                       down.indices.numpy().astype(np.int64), (-down.values).numpy().astype(np.float32))


def residual_direction(session, sae_index: int, feature: int) -> torch.Tensor:
    """(C,) what one unit of the feature writes into the residual stream: its decoder row, through
    the layer's output projection for an SAE of attn.hook_z or mlp.hook_post."""
    sae = session.sae(sae_index)
    row = sae.module.W_dec[feature].float()
    if sae.config.rescale_acts_by_decoder_norm:
        row = row / row.norm()
    spec, config = sae.spec, session.config
    if spec.is_residual:
        return row
    if config.norm_placement != "pre":
        raise ModelError(f"the logit effect of an SAE of {spec.name} would pass through this model's norm after the "
                         "layer's output; use an SAE of the residual stream")
    block = session.model.blocks[spec.layer]
    proj = block.attn.c_proj if spec.is_z else block.mlp.c_proj
    return proj.weight.float() @ row  # (C,)


@torch.inference_mode()
def sae_overview(session, sae_index: int, intervention: Intervention | None = None,
                 skip_bos: bool = True) -> SaeOverview:
    """L0 per token, the fraction of variance unexplained (over tokens, the BOS token left out
    with `skip_bos`), and the next-token KL when the SAE's reconstruction replaces the activation."""
    sae = session.sae(sae_index)
    change = requested(session.config, intervention)
    bos = _bos(session, skip_bos)
    l0, err, inputs = [], 0.0, []
    for start, a, stats, x in _encoded_blocks(session, sae_index, change):
        l0.append((a > 0).sum(-1).to(torch.int32).cpu().numpy())
        err_rows = (x - sae.module.decode(a, stats)).pow(2).sum(-1)  # (n,)
        if start == 0 and bos:
            err_rows = err_rows[1:]
        err += float(err_rows.sum())
        inputs.append(x)
    x = torch.cat(inputs)  # (T, d_in)
    kept = x[1:] if bos and x.shape[0] > 1 else x
    total = float((kept - kept.mean(0)).pow(2).sum())
    fvu = err / total if total > 0 else 0.0
    kl = _spliced_kl(session, sae_index, change)
    return SaeOverview(np.concatenate(l0), fvu, float(kl.mean()), kl.numpy().astype(np.float32))


def _spliced_kl(session, sae_index: int, change: Intervention) -> torch.Tensor:
    """(T,) KL(run || run with the SAE's reconstruction in place of its activation) per token."""
    sae, model = session.sae(sae_index), session.model
    resid = session.residuals_under(change)
    start = max(0, sae.spec.rerun_layer)

    def splice(_m, _inputs, x):
        inputs = sae.input(x)
        a, stats = sae.module.encode_with_stats(inputs)
        # The processing is a shift per token: the reconstruction stands in for the processed input.
        return x + sae.input.back(sae.module.decode(a, stats) - inputs, x)

    with hooks(model, [*session.intervention_hooks(change, start), (sae.spec.edit_name, splice)]):
        spliced = model.run_blocks(resid[start], start)[0]  # (T, C)
    clean = resid[-1][0]
    out = []
    for i in range(0, clean.shape[0], LOGIT_ROWS):
        lp = torch.log_softmax(model.unembed(clean[i:i + LOGIT_ROWS]).float()[:, : session.n_vocab], -1)
        lq = torch.log_softmax(model.unembed(spliced[i:i + LOGIT_ROWS]).float()[:, : session.n_vocab], -1)
        out.append((lp.exp() * (lp - lq)).sum(-1).clamp_min(0))
    return torch.cat(out).cpu()


def _check_feature(session, sae_index: int, feature: int) -> None:
    d_sae = session.sae(sae_index).config.d_sae
    if not (isinstance(feature, (int, np.integer)) and 0 <= feature < d_sae):
        raise ModelError(f"feature {feature} does not exist; SAE {sae_index} has features 0..{d_sae - 1}")
