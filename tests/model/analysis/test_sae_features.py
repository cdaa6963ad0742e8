"""An SAE's features in a run, against the formulas written out here from hooked activations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import TINY, scaled_init_loaded
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_float32_close, model_reduction
from transformer_viewer.model.analysis import sae_features
from transformer_viewer.model.analysis.sae_features import (
    feature_logit_effect,
    feature_row,
    reconstruction_share,
    sae_overview,
    token_features,
)
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.hooks import hooks, run_with_cache
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sae.loading import load_sae

PROMPT = "<|endoftext|>The quick brown fox jumps over the lazy dog and runs far away"
HOOK = "blocks.0.hook_resid_post"
D_SAE = 80


@pytest.fixture
def setup(tmp_path):
    s = Session(scaled_init_loaded(seed=2))
    s.set_prompt(PROMPT)
    w = random_weights("standard", 32, D_SAE, seed=1)
    index = s.attach_sae(load_sae(write_saelens(tmp_path / "sae", saelens_cfg("standard", 32, D_SAE, HOOK), w), TINY))
    w = {k: torch.from_numpy(v).double() for k, v in w.items()}
    with torch.no_grad():
        _, cache = run_with_cache(s.model, torch.tensor([s.tokens.ids]), [HOOK])
    x = cache[HOOK][0].double()  # (T, C)
    a = torch.relu((x - w["b_dec"]) @ w["W_enc"] + w["b_enc"])  # (T, d_sae): SAELens's standard encode
    return s, index, w, x, a


def _close(got, want, what):
    assert_float32_close(got, want, reduction=model_reduction(TINY), depth=2, what=what)


def test_token_features_are_each_tokens_top_k_and_leave_bos_out(setup, monkeypatch):
    s, index, _w, _x, a = setup
    monkeypatch.setattr(sae_features, "BLOCK_BYTES", 4 * D_SAE * 3)  # blocks of 3 positions
    got = token_features(s, index, top=5)
    assert got.ids.shape == got.acts.shape == (len(s.tokens.ids), 5) and got.bos_left_out
    assert (got.ids[0] == -1).all() and (got.acts[0] == 0).all()
    values, ids = torch.topk(a, 5, dim=-1)
    firing = values[1:] > 1e-4  # away from ReLU's edge, where the two roundings may disagree
    assert firing.sum() > 10
    np.testing.assert_array_equal(got.ids[1:][firing.numpy()], ids[1:][firing].numpy())
    _close(got.acts[1:], np.where(got.ids[1:] >= 0, values[1:].numpy(), 0), "top activations")
    with_bos = token_features(s, index, top=5, skip_bos=False)
    assert (with_bos.ids[0] >= 0).any()


def test_feature_row_and_reconstruction_share(setup):
    s, index, w, _x, a = setup
    f = int(torch.argmax(a[1:].sum(0)))
    _close(feature_row(s, index, f), a[:, f].numpy(), "feature row")
    weighted = a[3] * w["W_dec"].norm(dim=1)
    assert reconstruction_share(s, index, f, 3) == pytest.approx(float(weighted[f] / weighted.sum()), rel=1e-4, abs=1e-6)
    with pytest.raises(ModelError, match="features 0..79"):
        feature_row(s, index, D_SAE)


def test_logit_effect_is_the_direction_through_the_frozen_final_norm(setup):
    s, index, w, _x, _a = setup
    ids = torch.tensor([s.tokens.ids])
    with torch.no_grad():
        _, cache = run_with_cache(s.model, ids, ["blocks.1.hook_resid_post"])
    final = cache["blocks.1.hook_resid_post"][0, -1].double()
    d = w["W_dec"][7]
    ln = s.model.ln_f
    through = ln.weight.detach().double() * (d - d.mean()) / torch.sqrt(final.var(unbiased=False) + ln.eps)
    want = s.model.lm_head.weight.detach().double()[: s.n_vocab] @ through
    got = feature_logit_effect(s, index, 7, top=6)
    np.testing.assert_array_equal(got.promoted_ids, torch.topk(want, 6).indices.numpy())
    np.testing.assert_array_equal(got.suppressed_ids, torch.topk(-want, 6).indices.numpy())
    _close(got.promoted_values, torch.topk(want, 6).values.numpy(), "promoted")


def test_overview_l0_fvu_and_spliced_kl(setup):
    s, index, w, x, a = setup
    got = sae_overview(s, index)
    np.testing.assert_array_equal(got.l0, (a > 0).sum(-1).numpy())  # no pre-activation sits at ReLU's edge here
    recon = a @ w["W_dec"] + w["b_dec"]
    kept, rk = x[1:], recon[1:]  # the BOS token left out
    fvu = float((kept - rk).pow(2).sum() / (kept - kept.mean(0)).pow(2).sum())
    assert got.fvu == pytest.approx(fvu, rel=1e-4)

    def splice(_m, _i, act):
        return recon.float()[None]

    ids = torch.tensor([s.tokens.ids])
    with torch.no_grad():
        clean, _ = s.model(ids)
        with hooks(s.model, [(HOOK, splice)]):
            spliced, _ = s.model(ids)
    lp = torch.log_softmax(clean[0, :, : s.n_vocab].double(), -1)
    lq = torch.log_softmax(spliced[0, :, : s.n_vocab].double(), -1)
    kl = (lp.exp() * (lp - lq)).sum(-1)
    assert kl.mean() > 1e-3
    np.testing.assert_allclose(got.kl_per_token, kl.numpy(), rtol=1e-3, atol=1e-4)


def test_features_under_a_clamp_read_the_clamped_run(setup):
    s, index, _w, _x, _a = setup
    clamp = Intervention.make(TINY, clamps=(FeatureClamp(index, 4, "set", 6.0),))
    row = feature_row(s, index, 4, intervention=clamp)
    clean = feature_row(s, index, 4)
    assert not np.allclose(row, clean)
    assert token_features(s, index, top=3, intervention=clamp).ids.shape == (len(s.tokens.ids), 3)
