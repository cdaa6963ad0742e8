"""Information routes under feature clamps: a layer's attention part is the real resid_mid -
resid_pre of the clamped run (clamps of z, the attention's output and resid_mid folded in, a z
clamp into each head's own piece), its MLP part the rest of the real update; on a sequential, a
post-norm (Gemma 2) and a parallel-block (Pythia) family."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.families import family_session
from tests.helpers.models import scaled_init_loaded
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_float32_close, model_reduction
from transformer_viewer.model.analysis.logit_attribution import logit_attribution
from transformer_viewer.model.analysis.routes import LayerParts, information_routes
from transformer_viewer.model.analysis.row_clamps import row_clamps
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.sae.loading import load_sae

POINTS = ("attn.hook_z", "hook_attn_out", "hook_resid_mid", "mlp.hook_post", "hook_mlp_out", "hook_resid_post")


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    tiny = Session(scaled_init_loaded(seed=2))
    tiny.set_prompt("The quick brown fox jumps over the lazy dog and runs")
    out = {"tiny": tiny}
    for name in ("gemma2", "pythia"):
        out[name] = family_session(name, tmp_path_factory.mktemp(name))
    return out


def _attach(s, tmp_path, point, layer):
    c = s.config
    d_in = {"attn.hook_z": c.n_head * c.head_size, "mlp.hook_post": c.n_mlp}.get(point, c.n_embd)
    hook = f"blocks.{layer}.{point}"
    w = random_weights("standard", d_in, 48, seed=5)
    folder = write_saelens(tmp_path / hook, saelens_cfg("standard", d_in, 48, hook), w)
    return s.attach_sae(load_sae(folder, c))


@torch.no_grad()
def _real(s, change, layer):
    """The clamped run's resid_mid and resid_post of `layer`, (T, C) each, read after every hook."""
    got = {}

    def reader(key):
        def read(_m, _i, x):
            got[key] = x[0].float()
        return read

    named = s.intervention_hooks(change) + [(f"blocks.{layer}.hook_resid_mid", reader("mid")),
                                            (f"blocks.{layer}.hook_resid_post", reader("post"))]
    with hooks(s.model, named):
        s.model(torch.tensor([s.tokens.ids]))
    return got["mid"], got["post"]


@pytest.mark.parametrize("name", ["tiny", "gemma2", "pythia"])
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("ablation", [None, "mean"], ids=["unmasked", "mean"])
def test_the_parts_of_a_clamped_layer_add_up_to_its_real_update(sessions, tmp_path, name, point, ablation):
    s = sessions[name]
    layer = min(1, s.config.n_layer - 1)
    index = _attach(s, tmp_path, point, layer)
    try:
        _check_layer(s, index, point, layer, ablation)
    finally:
        s.detach_sae(index)


@torch.inference_mode()
def _check_layer(s, index, point, layer, ablation):
    c = s.config
    mask = np.zeros((c.n_layer, c.n_head), bool)
    if ablation:
        mask[layer, 0] = True
    clamps = (FeatureClamp(index, 3, "set", 4.0), FeatureClamp(index, 8, "scale", 3.0, 5))
    change = Intervention.make(c, mask, ablation or "zero", clamps=clamps)
    resid = s.residuals_under(change)
    T = len(s.tokens.ids)
    parts = LayerParts(s.model.blocks[layer], resid[layer], resid[layer + 1], T - 1, mask[layer],
                       ablation or "zero", lambda q: row_clamps(s, change, q).get(layer))
    mid, post = _real(s, change, layer)
    x = resid[layer][0].float()
    scale = float(post.abs().max())
    tol = dict(reduction=model_reduction(c), depth=c.n_layer + 1, scale=scale)
    assert_float32_close(parts.x_next, post, what="the layer's real output", **tol)
    attention = torch.stack([parts.attention(q).out for q in range(T)])  # (T, C)
    # The attention's side is the real resid_mid (a parallel block's too); the MLP's part is the rest.
    assert_float32_close(x + attention, mid, what="resid_mid", **tol)
    if point == "attn.hook_z" and not ablation:  # the heads' pieces, each head's clamp at its own row
        for q in (3, T - 1):
            a = parts.attention(q)
            pieces = torch.einsum("hk,khc->kc", a.pattern, parts.vo[: q + 1])  # (q + 1, C)
            if a.frozen is not None:
                pieces = a.frozen.linear(pieces)
                bias = a.frozen.linear(parts.bias) + (a.frozen.bias if a.frozen.bias is not None else 0.0)
            else:
                bias = parts.bias
            assert a.z_clamp is not None and float(a.z_clamp.abs().max()) > 1e-3
            whole = pieces.sum(dim=0) + a.z_clamp.sum(dim=0) + bias
            assert_float32_close(whole, a.out, what=f"the pieces and the clamp at {q}", **tol)
    unclamped = Intervention.make(c, mask, ablation or "zero")
    assert information_routes(s, T - 1, 0.0, intervention=change).to_json() != \
        information_routes(s, T - 1, 0.0, intervention=unclamped).to_json()
    a = logit_attribution(s, T - 1, intervention=change)
    values = np.array([t["value"] for t in a.terms()])
    assert a.clamped == (layer,)
    assert_float32_close(values.sum(), a.logit, reduction=model_reduction(c), depth=c.n_layer + 1,
                         scale=max(1.0, float(np.abs(values).sum())), what="the logit's terms")
