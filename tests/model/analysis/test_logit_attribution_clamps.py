"""Direct logit attribution under feature clamps: the terms still add up to the logit with a
clamp at every kind of hook point, with and without a head mask; a layer's clamp term equals
the clamp's addition at the position, recorded by a hook written out here and read through the
frozen final norm; an attached SAE without clamps changes no number."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import TINY, scaled_init_loaded
from tests.helpers.saes import random_weights, saelens_cfg, standard_clamp_hook, write_saelens
from tests.helpers.tolerances import assert_float32_close, model_reduction
from transformer_viewer.model.analysis.attribution import head_attribution
from transformer_viewer.model.analysis.logit_attribution import COMPONENTS, head_sources, logit_attribution
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention, head_mask_hooks
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.sae.loading import load_sae

PROMPT = "The quick brown fox jumps over the lazy dog and runs"
D_SAE = 64
# Each hook point an SAE can read, with the layer whose clamp term its clamp goes to.
POINTS = {"blocks.0.hook_resid_post": 0, "blocks.1.hook_resid_pre": 0, "blocks.1.hook_attn_out": 1,
          "blocks.0.hook_mlp_out": 0, "blocks.1.hook_resid_mid": 1, "blocks.1.attn.hook_z": 1,
          "blocks.0.mlp.hook_post": 0}


def _session():
    s = Session(scaled_init_loaded(seed=2))
    s.set_prompt(PROMPT)
    return s


def _sae(tmp_path, hook, seed=0):
    d_in = TINY.n_embd * 4 if hook.endswith("mlp.hook_post") else TINY.n_embd
    w = random_weights("standard", d_in, D_SAE, seed=seed)
    folder = write_saelens(tmp_path / f"sae{seed}", saelens_cfg("standard", d_in, D_SAE, hook), w)
    return load_sae(folder, TINY), {k: torch.from_numpy(v) for k, v in w.items()}


def _mask(ablation):
    mask = np.zeros((TINY.n_layer, TINY.n_head), bool)
    if ablation is not None:
        mask[1, 0] = mask[0, 2] = True
    return mask


def _edit_name(hook):
    return "blocks.0.hook_resid_post" if hook == "blocks.1.hook_resid_pre" else hook


def _hand_run(s, mask, ablation, hook, w, clamps):
    """(the clamp's activation before and after it, the final residual (T, C)) in a forward
    written out with hooks: the head mask, then the hand-written clamp."""
    seen = {}
    named = head_mask_hooks(mask, ablation or "zero") + [(_edit_name(hook), standard_clamp_hook(w, clamps, seen))]
    return seen, _final_residual(s, named)


def _final_residual(s, named):
    """The final residual stream (T, C) of a plain forward with the hooks `named`."""
    final = {}
    take = s.model.ln_f.register_forward_pre_hook(lambda _m, inputs: final.setdefault("x", inputs[0][0]))
    try:
        with hooks(s.model, named), torch.no_grad():
            s.model(torch.tensor([s.tokens.ids]))
    finally:
        take.remove()
    return final["x"]


def _residual_write(s, hook, delta):
    """A clamp's addition at one position as a write into the residual stream, (C,)."""
    if hook.endswith("attn.hook_z"):
        return delta.reshape(-1) @ s.model.blocks[1].attn.c_proj.weight.T  # through W_O
    if hook.endswith("mlp.hook_post"):
        return delta @ s.model.blocks[0].mlp.c_proj.weight.T  # through the MLP's output projection
    return delta


@torch.no_grad()
def _through_final_norm(s, final_row, write, token):
    ln = s.model.ln_f
    sigma = torch.sqrt(final_row.var(unbiased=False) + ln.eps)
    return float(((write - write.mean()) * ln.weight / sigma) @ s.model.lm_head.weight[token])


def assert_terms_add_up(a):
    values = np.array([t["value"] for t in a.terms()], dtype=np.float64)
    assert_float32_close(values.sum(), a.logit, reduction=model_reduction(TINY), depth=TINY.n_layer + 1,
                         scale=max(1.0, float(np.abs(values).sum())), what="the sum of the terms")


@pytest.mark.parametrize("hook", list(POINTS))
@pytest.mark.parametrize("clamp_at", [None, 4], ids=["all positions", "position 4"])
@pytest.mark.parametrize("ablation", [None, "zero", "mean"], ids=["unmasked", "zero", "mean"])
def test_terms_add_up_and_the_clamp_term_is_the_clamps_direct_effect(tmp_path, hook, clamp_at, ablation):
    s = _session()
    loaded, w = _sae(tmp_path, hook)
    index = s.attach_sae(loaded)
    clamps = (FeatureClamp(index, 5, "set", 3.0, clamp_at), FeatureClamp(index, 9, "scale", 0.0, clamp_at))
    mask = _mask(ablation)
    change = Intervention.make(TINY, mask, ablation or "zero", clamps=clamps)
    unclamped = Intervention.make(TINY, mask, ablation or "zero")
    layer = POINTS[hook]
    for p in (4, len(s.tokens.ids) - 1):
        a = logit_attribution(s, position=p, intervention=change)
        assert_terms_add_up(a)
        assert a.clamped == (layer,)
        assert [t["layer"] for t in a.terms() if t["component"] == "clamp"] == [layer]
        assert {t["component"] for t in a.terms()} <= set(COMPONENTS)
        seen, final = _hand_run(s, mask, ablation, hook, w, clamps)
        token = a.tokens[0]
        delta = (seen["out"] - seen["in"])[0, p]  # the clamp's addition at p
        want = _through_final_norm(s, final[p], _residual_write(s, hook, delta.float()), token)
        assert_float32_close(a.clamp[layer], want, reduction=model_reduction(TINY), depth=TINY.n_layer + 1,
                             scale=max(1.0, abs(a.logit)), what=f"the clamp term at {p}")
        if p == 4:
            assert abs(want) > 1e-3  # the clamp does act at the position it was set for
            assert abs(a.logit - logit_attribution(s, 4, a.tokens, intervention=unclamped).logit) > 1e-3
    assert np.count_nonzero(a.clamp) <= 1


def test_a_clamp_and_two_saes_on_one_point_add_up_with_a_head_mask(tmp_path):
    """resid_post of layer 0 and resid_pre of layer 1 are one tensor: both clamps go to layer 0."""
    s = _session()
    post = s.attach_sae(_sae(tmp_path, "blocks.0.hook_resid_post")[0])
    pre = s.attach_sae(_sae(tmp_path, "blocks.1.hook_resid_pre", seed=1)[0])
    z = s.attach_sae(_sae(tmp_path, "blocks.1.attn.hook_z", seed=2)[0])
    clamps = (FeatureClamp(post, 3, "set", 4.0), FeatureClamp(pre, 7, "scale", 3.0, 6), FeatureClamp(z, 1, "set", 2.0))
    a = logit_attribution(s, position=6, tokens=(11, 290), intervention=Intervention.make(TINY, _mask("mean"), "mean",
                                                                                           clamps=clamps))
    assert a.clamped == (0, 1)
    assert_terms_add_up(a)


def test_an_attached_sae_without_clamps_changes_no_number(tmp_path):
    from transformer_viewer.model.analysis.routes import information_routes

    plain, attached = _session(), _session()
    attached.attach_sae(_sae(tmp_path, "blocks.1.attn.hook_z")[0])
    for ablation in ("zero", "mean"):
        change = Intervention.make(TINY, _mask(ablation), ablation)
        a, b = (logit_attribution(s, position=5, intervention=change) for s in (plain, attached))
        assert a.terms() == b.terms()
        assert not b.clamped and not b.clamp.any()
        assert np.array_equal(a.heads, b.heads) and np.array_equal(a.mlp, b.mlp)
        assert np.array_equal(*(head_attribution(s, 5, intervention=change).direct for s in (plain, attached)))
        assert np.array_equal(*(head_sources(s, 1, 2, 5, intervention=change) for s in (plain, attached)))
        assert information_routes(plain, 5, intervention=change).to_json() == \
            information_routes(attached, 5, intervention=change).to_json()


@pytest.mark.parametrize("ablation", [None, "mean"], ids=["unmasked", "mean"])
def test_heads_under_a_z_clamp_write_their_unclamped_outputs_of_the_clamped_run(tmp_path, ablation):
    """A clamp of layer 0's output changes layer 1's inputs; layer 1's z clamp is the clamp's term:
    each head's write is its z before the clamp, in that run, through W_O."""
    s = _session()
    before = s.attach_sae(_sae(tmp_path, "blocks.0.hook_resid_post", seed=3)[0])
    loaded, w = _sae(tmp_path, "blocks.1.attn.hook_z")
    index = s.attach_sae(loaded)
    z_clamps = (FeatureClamp(index, 5, "set", 3.0), FeatureClamp(index, 12, "scale", 4.0))
    clamps = (FeatureClamp(before, 2, "set", 5.0),) + z_clamps
    mask = _mask(ablation)
    change = Intervention.make(TINY, mask, ablation or "zero", clamps=clamps)
    p = 7
    got = head_attribution(s, p, intervention=change)
    # Layer 1's z before its clamp, in a run whose layer 0 output is clamped (the hand-written run's second hook).
    seen = {}
    w0 = {k: torch.from_numpy(v) for k, v in random_weights("standard", TINY.n_embd, D_SAE, seed=3).items()}
    named = head_mask_hooks(mask, ablation or "zero") + [
        ("blocks.0.hook_resid_post", standard_clamp_hook(w0, clamps[:1])),
        ("blocks.1.attn.hook_z", standard_clamp_hook(w, z_clamps, seen))]
    final = _final_residual(s, named)
    hs = TINY.n_embd // TINY.n_head
    w_o = s.model.blocks[1].attn.c_proj.weight  # (C, nh * hs)
    want = [_through_final_norm(s, final[p], seen["in"][0, p, h] @ w_o[:, h * hs:(h + 1) * hs].T, got.token_id)
            for h in range(TINY.n_head)]
    assert_float32_close(got.direct[1], want, reduction=model_reduction(TINY), depth=TINY.n_layer + 1,
                         scale=max(1.0, abs(got.logit)), what="layer 1's heads under the z clamp")
    dla = logit_attribution(s, p, intervention=change)
    assert_float32_close(dla.heads, got.direct, reduction=model_reduction(TINY), depth=TINY.n_layer + 1,
                         scale=max(1.0, abs(got.logit)), what="the heads' terms of the logit attribution")
    for h in range(TINY.n_head):
        assert_float32_close(head_sources(s, 1, h, p, intervention=change).sum(), dla.heads[1, h],
                             reduction=model_reduction(TINY), depth=TINY.n_layer + 1,
                             scale=max(1.0, abs(got.logit)), what=f"head 1.{h}'s split by source")
    without_z = Intervention.make(TINY, mask, ablation or "zero", clamps=clamps[:1])
    assert abs(got.logit - head_attribution(s, p, got.token_id, intervention=without_z).logit) > 1e-3  # z's clamp acts
    assert abs(dla.clamp[1]) > 1e-3  # and is layer 1's clamp term, not its heads'
