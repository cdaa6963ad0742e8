"""Encode and decode equal SAELens's definitions, written out here in float64 NumPy from the
formulas, for each architecture, normalisation and file layout, on random SAEs on disk."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import TINY
from tests.helpers.saes import random_weights, saelens_cfg, write_npz, write_saelens
from transformer_viewer.model.sae.loading import load_sae

D_IN, D_SAE, K = TINY.n_embd, 96, 7
HOOK = "blocks.1.hook_resid_post"
TOL = 1e-5


def _normalize(x, kind):
    if kind == "constant_norm_rescale":
        coeff = np.sqrt(x.shape[-1]) / np.linalg.norm(x, axis=-1, keepdims=True)
        return x * coeff, lambda y: y / coeff
    if kind == "layer_norm":
        mu = x.mean(-1, keepdims=True)
        std = (x - mu).std(-1, ddof=1, keepdims=True)
        return (x - mu) / (std + 1e-5), lambda y: y * std + mu
    return x, lambda y: y


def reference(w, arch, x, normalize="none", apply_b_dec=True, k=None, rescale=False):
    """SAELens's encode then decode, from its formulas (float64)."""
    w = {n: v.astype(np.float64) for n, v in w.items()}
    xn, undo = _normalize(x.astype(np.float64), normalize)
    sae_in = xn - (w["b_dec"] if apply_b_dec else 0.0)
    dec_norm = np.linalg.norm(w["W_dec"], axis=1)
    if arch == "gated":
        gate = sae_in @ w["W_enc"] + w["b_gate"] > 0
        mag = np.maximum(sae_in @ (w["W_enc"] * np.exp(w["r_mag"])) + w["b_mag"], 0)
        a = gate * mag
    else:
        pre = sae_in @ w["W_enc"] + w["b_enc"]
        if arch == "standard":
            a = np.maximum(pre, 0)
        elif arch == "jumprelu":
            a = np.maximum(pre, 0) * (pre > w["threshold"])
        else:
            if rescale:
                pre = pre * dec_norm
            a = np.zeros_like(pre)
            top = np.argsort(-pre, axis=-1)[..., :k]
            np.put_along_axis(a, top, np.maximum(np.take_along_axis(pre, top, -1), 0), -1)
    acts = a / dec_norm if rescale else a
    return a, undo(acts @ w["W_dec"] + w["b_dec"])


def _x(seed=1, n=12):
    return np.random.default_rng(seed).standard_normal((n, D_IN)).astype(np.float32) * 3


def _check(loaded, w, arch, **kw):
    x = _x()
    a, stats = loaded.module.encode_with_stats(torch.from_numpy(x))
    want_a, want_recon = reference(w, arch, x, **kw)
    np.testing.assert_allclose(a.numpy(), want_a, atol=TOL, rtol=TOL)
    np.testing.assert_allclose(loaded.module.decode(a, stats).numpy(), want_recon, atol=TOL, rtol=TOL)
    assert (want_a > 0).any() and (want_a == 0).any()  # the activation's cut matters here


@pytest.mark.parametrize("layout", ["6", "5"])
@pytest.mark.parametrize("arch", ["standard", "jumprelu", "topk", "gated"])
def test_each_architecture_in_each_cfg_layout(tmp_path, arch, layout):
    w = random_weights(arch, D_IN, D_SAE, seed=3)
    folder = write_saelens(tmp_path / "sae", saelens_cfg(arch, D_IN, D_SAE, HOOK, layout, k=K), w)
    loaded = load_sae(folder, TINY)
    assert loaded.config.architecture == arch and loaded.config.hook == HOOK
    _check(loaded, w, arch, k=K)


@pytest.mark.parametrize("normalize", ["constant_norm_rescale", "layer_norm"])
def test_normalisations(tmp_path, normalize):
    w = random_weights("standard", D_IN, D_SAE, seed=4)
    cfg = saelens_cfg("standard", D_IN, D_SAE, HOOK, normalize_activations=normalize)
    loaded = load_sae(write_saelens(tmp_path / "sae", cfg, w), TINY)
    _check(loaded, w, "standard", normalize=normalize)


def test_expected_average_only_in_folds_the_given_factor(tmp_path):
    w = random_weights("standard", D_IN, D_SAE, seed=5)
    cfg = saelens_cfg("standard", D_IN, D_SAE, HOOK, normalize_activations="expected_average_only_in")
    folder = write_saelens(tmp_path / "sae", cfg, w)
    s = 0.37
    loaded = load_sae(folder, TINY, norm_scaling_factor=s)
    x = _x()
    a = loaded.module.encode(torch.from_numpy(x))
    want_a, want_recon = reference(w, "standard", x * s)  # SAELens scales the input, folded into the weights
    np.testing.assert_allclose(a.numpy(), want_a, atol=TOL, rtol=TOL)
    np.testing.assert_allclose(loaded.module.decode(a).numpy(), want_recon / s, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("apply_b_dec", [True, False])
def test_topk_rescaled_by_decoder_norm_and_b_dec_choice(tmp_path, apply_b_dec):
    w = random_weights("topk", D_IN, D_SAE, seed=6)
    cfg = saelens_cfg("topk", D_IN, D_SAE, HOOK, k=K, rescale_acts_by_decoder_norm=True,
                      apply_b_dec_to_input=apply_b_dec)
    loaded = load_sae(write_saelens(tmp_path / "sae", cfg, w), TINY)
    _check(loaded, w, "topk", k=K, rescale=True, apply_b_dec=apply_b_dec)


@pytest.mark.parametrize("arch", ["standard", "jumprelu"])
def test_gemma_scope_npz(tmp_path, arch):
    w = random_weights(arch, D_IN, D_SAE, seed=7)
    path = write_npz(tmp_path / "layer_1" / "params.npz", w)
    loaded = load_sae(f"{path}@{HOOK}", TINY)
    assert not loaded.config.apply_b_dec_to_input  # Gemma Scope subtracts no b_dec from the input
    _check(loaded, w, arch, apply_b_dec=False)


def test_decode_difference_is_exactly_zero_where_nothing_changed(tmp_path):
    w = random_weights("standard", D_IN, D_SAE, seed=8)
    cfg = saelens_cfg("standard", D_IN, D_SAE, HOOK, normalize_activations="layer_norm")
    loaded = load_sae(write_saelens(tmp_path / "sae", cfg, w), TINY)
    a, stats = loaded.module.encode_with_stats(torch.from_numpy(_x()))
    changed = a.clone()
    changed[3, 5] = 4.0
    delta = loaded.module.decode_difference(changed, a, stats)
    assert torch.count_nonzero(delta[torch.arange(len(a)) != 3]) == 0
    want = loaded.module.decode(changed, stats) - loaded.module.decode(a, stats)
    np.testing.assert_allclose(delta.numpy(), want.numpy(), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("arch", ["standard", "jumprelu", "topk", "gated"])
def test_a_few_features_alone_equal_their_columns_of_the_whole_encode(tmp_path, arch):
    w = random_weights(arch, D_IN, D_SAE, seed=9)
    loaded = load_sae(write_saelens(tmp_path / "sae", saelens_cfg(arch, D_IN, D_SAE, HOOK, k=K), w), TINY)
    x = torch.from_numpy(_x())
    features = torch.tensor([0, 17, 40, 95])
    some, _ = loaded.module.encode_features(x, features)
    whole = loaded.module.encode(x)[:, features]
    np.testing.assert_allclose(some.numpy(), whole.numpy(), atol=TOL, rtol=TOL)


@pytest.mark.parametrize("arch, top", [("standard", 5), ("topk", 3), ("topk", 10), ("gated", 4)])
def test_top_features_are_the_largest_activations(tmp_path, arch, top):
    w = random_weights(arch, D_IN, D_SAE, seed=10)
    loaded = load_sae(write_saelens(tmp_path / "sae", saelens_cfg(arch, D_IN, D_SAE, HOOK, k=K), w), TINY)
    a, _ = reference(w, arch, _x(), k=K)
    values, ids = loaded.module.top_features(torch.from_numpy(_x()), top)
    want = -np.sort(-a, axis=-1)[:, :top]
    np.testing.assert_allclose(values.numpy(), want, atol=TOL, rtol=TOL)
    firing = values.numpy() > 0
    np.testing.assert_allclose(np.take_along_axis(a, ids.numpy(), -1)[firing], want[firing], atol=TOL, rtol=TOL)
