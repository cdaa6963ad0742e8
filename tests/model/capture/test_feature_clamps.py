"""Feature clamps: x + (dec(a') - dec(a)) at the SAE's hook point, checked against hooks written
out here in a plain forward; no clamp leaves the model bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import TINY, scaled_init_loaded
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_float32_close, assert_probs_close, largest_logit, model_reduction
from transformer_viewer.model.analysis.generate import generate
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention, head_mask_hooks
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.hooks import hooks, run_with_cache
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sae.loading import load_sae

PROMPT = "The quick brown fox jumps over the lazy dog and runs"
D_SAE = 64


def _session():
    s = Session(scaled_init_loaded(seed=2))
    s.set_prompt(PROMPT)
    return s


def _sae(tmp_path, hook, seed=0, **cfg):
    w = random_weights("standard", 32, D_SAE, seed=seed)
    folder = write_saelens(tmp_path / f"sae{seed}", saelens_cfg("standard", 32, D_SAE, hook, **cfg), w)
    return load_sae(folder, TINY), {k: torch.from_numpy(v) for k, v in w.items()}


def _hand_hook(w, clamps, value_bias=None):
    """The clamp written out: standard SAE features of x, clamped, the decoder's difference added."""
    def hook(_m, _i, x):
        z = x.float()
        flat = (z - value_bias if value_bias is not None else z).reshape(*x.shape[:2], -1)  # (B, T, d_in)
        a = torch.relu((flat - w["b_dec"]) @ w["W_enc"] + w["b_enc"])  # (B, T, d_sae)
        a2 = a.clone()
        for c in clamps:
            rows = slice(None) if c.position is None else c.position
            a2[:, rows, c.feature] = c.value if c.kind == "set" else a2[:, rows, c.feature] * c.value
        return x + ((a2 - a) @ w["W_dec"]).view(x.shape)
    return hook


def _hand_probs(session, named):
    ids = torch.tensor([session.tokens.ids])
    with hooks(session.model, named), torch.no_grad():
        logits, _ = session.model(ids)
    return torch.softmax(logits[0, -1, :session.n_vocab].float(), -1).numpy(), largest_logit(session.model, ids[0])


def _close(got, want, scale):
    assert_probs_close(got, want, logit_scale=scale, reduction=model_reduction(TINY), depth=TINY.n_layer + 1)


def test_an_attached_sae_without_clamps_leaves_every_number_bit_for_bit(tmp_path):
    plain, attached = _session(), _session()
    attached.attach_sae(_sae(tmp_path, "blocks.0.hook_resid_post")[0])
    mask = np.zeros((TINY.n_layer, TINY.n_head), bool)
    mask[1, 2] = True
    for s in (plain, attached):
        s.trace = s.run(None)
        s.masked = s.predict(Intervention.make(TINY, mask))
    assert np.array_equal(plain.trace.next.probs, attached.trace.next.probs)
    assert np.array_equal(plain.trace.token_logprobs, attached.trace.token_logprobs, equal_nan=True)
    assert np.array_equal(plain.masked.probs, attached.masked.probs)


@pytest.mark.parametrize("hook", ["blocks.0.hook_resid_post", "blocks.1.hook_resid_pre", "blocks.0.hook_mlp_out"])
@pytest.mark.parametrize("position", [None, 4])
def test_a_clamp_equals_a_hand_written_hook(tmp_path, hook, position):
    s = _session()
    loaded, w = _sae(tmp_path, hook)
    index = s.attach_sae(loaded)
    clamps = (FeatureClamp(index, 5, "set", 3.0, position), FeatureClamp(index, 9, "scale", 0.0, position))
    s.run(None)
    trace = s.run(Intervention.make(TINY, clamps=clamps))
    want, scale = _hand_probs(s, [(hook, _hand_hook(w, clamps))])
    clean = s.predict(None).probs
    assert not np.allclose(want, clean, atol=1e-4)  # the clamp changes the prediction
    _close(trace.next.probs, want, scale)
    _close(s.predict(Intervention.make(TINY, clamps=clamps)).probs, want, scale)


def test_hook_z_clamps_fold_value_biases_and_combine_with_head_masks(tmp_path):
    s = _session()
    loaded, w = _sae(tmp_path, "blocks.1.attn.hook_z", model_from_pretrained_kwargs={"fold_value_biases": True})
    assert loaded.config.processing == ("fold value biases",)
    index = s.attach_sae(loaded)
    attn = s.model.blocks[1].attn
    b_v = attn.c_attn.bias.detach()[2 * 32:].view(TINY.n_head, -1)  # (nh, hs): no grouped heads here
    mask = np.zeros((TINY.n_layer, TINY.n_head), bool)
    mask[1, 0] = True
    clamps = (FeatureClamp(index, 3, "set", 2.5),)
    got = s.predict(Intervention.make(TINY, mask, "zero", clamps=clamps)).probs
    want, scale = _hand_probs(s, head_mask_hooks(mask, "zero") + [("blocks.1.attn.hook_z", _hand_hook(w, clamps, b_v))])
    _close(got, want, scale)


def test_a_clamp_reruns_from_its_layer_and_a_changed_clamp_is_not_applied_twice(tmp_path):
    s, fresh = _session(), _session()
    for session in (s, fresh):
        session.attach_sae(_sae(tmp_path, "blocks.1.hook_resid_pre")[0])
        session.attach_sae(_sae(tmp_path, "blocks.1.hook_resid_post", seed=1)[0])
        session.run(None)
    late = s.run(Intervention.make(TINY, clamps=(FeatureClamp(1, 2, "set", 4.0),)))
    assert late.first_layer_run == 1
    s.run(Intervention.make(TINY, clamps=(FeatureClamp(0, 7, "set", 5.0),)))  # edits block 0's output
    second = Intervention.make(TINY, clamps=(FeatureClamp(0, 7, "set", -2.0),))
    assert np.array_equal(s.run(second).next.probs, fresh.run(second).next.probs)


def test_generation_steers_with_clamps(tmp_path):
    s = _session()
    loaded, w = _sae(tmp_path, "blocks.0.hook_resid_post")
    index = s.attach_sae(loaded)
    clamps = (FeatureClamp(index, 11, "set", 8.0),)
    got = generate(s, 3, intervention=Intervention.make(TINY, clamps=clamps))
    ids = list(s.tokens.ids)
    with hooks(s.model, [("blocks.0.hook_resid_post", _hand_hook(w, clamps))]), torch.no_grad():
        for _ in range(3):
            logits, _ = s.model(torch.tensor([ids]))
            ids.append(int(torch.argmax(logits[0, -1, :s.n_vocab])))
    assert got.new_ids.tolist() == ids[len(s.tokens.ids):]


def test_clamps_are_checked_once_and_against_the_open_saes(tmp_path):
    s = _session()
    index = s.attach_sae(_sae(tmp_path, "blocks.0.hook_resid_post")[0])
    with pytest.raises(ModelError, match="kind"):
        Intervention.make(TINY, clamps=(FeatureClamp(index, 1, "add", 1.0),))
    with pytest.raises(ModelError, match="value"):
        Intervention.make(TINY, clamps=(FeatureClamp(index, 1, "set", float("nan")),))
    with pytest.raises(ModelError, match="features 0..63"):
        s.predict(Intervention.make(TINY, clamps=(FeatureClamp(index, D_SAE, "set", 1.0),)))
    s.detach_sae(index)
    with pytest.raises(ModelError, match="not open"):
        s.predict(Intervention.make(TINY, clamps=(FeatureClamp(index, 1, "set", 1.0),)))
    assert Intervention.make(TINY, clamps=(FeatureClamp(np.int64(0), 1, "set", 1),)) == \
        Intervention.make(TINY, clamps=(FeatureClamp(0, 1, "set", 1.0),))


def test_recomputed_mlp_activations_and_residuals_keep_the_clamp(tmp_path):
    from transformer_viewer.model.capture.on_demand import mlp_activations

    s = _session()
    loaded, w = _sae(tmp_path, "blocks.0.hook_resid_post")
    index = s.attach_sae(loaded)
    clamps = (FeatureClamp(index, 2, "set", 6.0),)
    trace = s.run(Intervention.make(TINY, clamps=clamps))
    with hooks(s.model, [("blocks.0.hook_resid_post", _hand_hook(w, clamps))]), torch.no_grad():
        _, cache = run_with_cache(
            s.model, torch.tensor([s.tokens.ids]), ["blocks.1.mlp.hook_post", "blocks.1.hook_resid_pre"])
    scale = float(cache["blocks.1.mlp.hook_post"].abs().max())
    assert_float32_close(mlp_activations(s, trace, 1), cache["blocks.1.mlp.hook_post"][0], reduction=model_reduction(TINY),
                         depth=2, scale=scale, what="layer 1's MLP under the clamp")
    s.run(None)
    s._runs.clear()  # the clamped run evicted: its residual stream is recomputed under the clamp
    assert_float32_close(s.resid_pre(trace, 1)[0], cache["blocks.1.hook_resid_pre"][0],
                         reduction=model_reduction(TINY), depth=2, what="resid_pre of layer 1 recomputed")


def test_a_run_after_detaching_a_clamped_sae_starts_over(tmp_path):
    s, fresh = _session(), _session()
    for session in (s, fresh):
        session.attach_sae(_sae(tmp_path, "blocks.0.hook_resid_post")[0])
        session.attach_sae(_sae(tmp_path, "blocks.1.hook_resid_post", seed=1)[0])
        session.run(None)
    s.run(Intervention.make(TINY, clamps=(FeatureClamp(0, 4, "set", 9.0),)))  # shapes every later layer
    s.detach_sae(0)
    fresh.detach_sae(0)
    late = Intervention.make(TINY, clamps=(FeatureClamp(1, 2, "set", 3.0),))
    assert np.array_equal(s.run(late).next.probs, fresh.run(late).next.probs)


@pytest.mark.parametrize("hook", ["blocks.1.hook_resid_post", "blocks.1.attn.hook_z"])
def test_a_hook_that_sees_the_last_rows_places_clamps_by_the_prompts_length(tmp_path, hook):
    """A block run from row r (its hooks see rows r..T-1) clamps the same rows as a whole run."""
    from transformer_viewer.model.capture.feature_clamps import clamp_hooks
    from transformer_viewer.model.sae.attached import AttachedSae

    loaded, _w = _sae(tmp_path, hook)
    sae = AttachedSae(loaded, _session().model)
    clamps = (FeatureClamp(0, 3, "set", 5.0, 2), FeatureClamp(0, 7, "scale", 3.0, 8), FeatureClamp(0, 1, "set", 0.0))
    saes = {0: sae}
    shape = (2, 10, 32) if "resid" in hook else (2, 10, TINY.n_head, 32 // TINY.n_head)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    (_name, whole), = clamp_hooks(clamps, saes)
    want = whole(None, (), x)
    for first in (0, 2, 3, 9):
        (_name, part), = clamp_hooks(clamps, saes, total=10)
        got = part(None, (), x[:, first:])
        # The same arithmetic on fewer rows: equal within float32 rounding (a matmul's kernel may
        # depend on its row count), while a clamp placed at the wrong row would differ by whole units.
        assert_float32_close(got, want[:, first:], reduction=D_SAE, depth=2, what=f"rows from {first}")
