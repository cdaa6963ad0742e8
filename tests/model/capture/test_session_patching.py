"""The session's corrupted prompt and the runs patches read from (model/capture/session_patching.py):
sites kept only when asked for, one cache per head mask and feature clamps (both runs clamped
alike), bounded by the memory budget; a patched prediction under clamps equals a hand-written forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_session
from tests.helpers.patch_clamps import clamped_session
from tests.helpers.patch_references import CLEAN, CORRUPTED, reference_logits
from tests.helpers.tolerances import assert_float32_close, assert_probs_close, largest_logit, model_reduction
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention, Patch
from transformer_viewer.model.capture.memory_budget import patch_sources_bytes
from transformer_viewer.model.decoder.hooks import hooks, run_with_cache
from transformer_viewer.model.errors import CaptureTooLargeError


def _session():
    s = tiny_session(CLEAN)
    s.set_corrupted(CORRUPTED)
    return s


def test_sites_are_kept_when_asked_for_and_equal_a_plain_forward():
    s = _session()
    L = s.config.n_layer
    first = s.patch_sources(sites={"z"})
    assert set(first.runs["clean"].acts) == {f"blocks.{la}.attn.hook_z" for la in range(L)}
    again = s.patch_sources(sites={"k"})
    assert again is first and "blocks.0.attn.hook_k" in again.runs["corrupted"].acts
    with torch.no_grad():
        _, cache = run_with_cache(s.model, torch.tensor([s.corrupted.ids]), ["blocks.1.attn.hook_k",
                                                                             "blocks.1.hook_resid_pre"])
    np.testing.assert_allclose(again.runs["corrupted"].acts["blocks.1.attn.hook_k"], cache["blocks.1.attn.hook_k"],
                               atol=1e-5)
    np.testing.assert_allclose(again.runs["corrupted"].resid[1], cache["blocks.1.hook_resid_pre"], atol=1e-5)


def test_another_head_mask_or_prompt_drops_the_runs():
    s = _session()
    first = s.patch_sources(sites=())
    mask = np.zeros((s.config.n_layer, s.config.n_head), dtype=bool)
    mask[0, 1] = True
    masked = s.patch_sources(Intervention.make(s.config, mask), sites=())
    assert masked is not first
    assert not torch.equal(masked.runs["clean"].resid[-1], first.runs["clean"].resid[-1])
    s.set_corrupted(CLEAN)
    assert s.patch_sources(sites=()).runs["corrupted"].resid[-1] is not masked.runs["corrupted"].resid[-1]


def test_the_runs_are_bounded_by_the_memory_budget():
    s = _session()
    T = len(s.tokens.ids)
    s.memory_budget = s.estimate_bytes(T) + 2 * patch_sources_bytes(s.config, T, ()) + 1
    s.patch_sources(sites=())  # the residual streams fit
    with pytest.raises(CaptureTooLargeError, match="memory budget; shorten the prompts to [0-9]+ tokens"):
        s.patch_sources(sites={"z", "q", "k", "v", "attn_out", "mlp_out"})


# -- under feature clamps: both runs are clamped alike, and a changed clamp is a new cache ------
def test_both_runs_are_clamped_and_a_changed_clamp_recomputes_them(tmp_path):
    s, clamps, hand = clamped_session(tmp_path)
    change = Intervention.make(s.config, clamps=clamps)
    sources = s.patch_sources(change, sites={"attn_out"})
    for name, tok in (("clean", s.tokens), ("corrupted", s.corrupted)):
        with torch.no_grad(), hooks(s.model, hand):
            _, cache = run_with_cache(s.model, torch.tensor([tok.ids]), ["blocks.0.hook_attn_out",
                                                                         "blocks.1.hook_resid_pre"])
        run = sources.runs[name]
        assert_float32_close(run.acts["blocks.0.hook_attn_out"], cache["blocks.0.hook_attn_out"],
                             reduction=model_reduction(s.config), depth=1, what=f"{name} clamped attn_out")
        assert_float32_close(run.resid[1], cache["blocks.1.hook_resid_pre"], reduction=model_reduction(s.config),
                             depth=2, what=f"{name} clamped resid_pre")
    assert s.patch_sources(change, sites={"attn_out"}) is sources  # the same clamps: the same runs
    plain = s.patch_sources(sites=())
    assert not torch.equal(plain.runs["clean"].resid[1], sources.runs["clean"].resid[1])
    # Another value of one clamp is another pair of runs, not the cached one.
    other = Intervention.make(s.config, clamps=(*clamps[:3], FeatureClamp(clamps[3].sae, 2, "set", 5.0)))
    changed = s.patch_sources(other, sites=())
    assert changed.mask_intervention == other and changed is not sources
    assert not torch.equal(changed.runs["corrupted"].resid[1], sources.runs["corrupted"].resid[1])


def test_predict_patched_under_clamps_equals_a_hand_written_forward(tmp_path):
    s, clamps, hand = clamped_session(tmp_path)
    mask = np.zeros((s.config.n_layer, s.config.n_head), dtype=bool)
    mask[1, 2] = True
    patches = (Patch("clean", "attn_out", 0, None, (9,)), Patch("clean", "resid_pre", 1, None, (10, 12)))
    got = s.predict_patched(Intervention.make(s.config, mask, patches=patches, clamps=clamps))
    unclamped = s.predict_patched(Intervention.make(s.config, mask, patches=patches))
    logits = reference_logits(s.model, torch.tensor([s.corrupted.ids]), torch.tensor([s.tokens.ids]), list(patches),
                              mask, clamps=hand)
    want = torch.softmax(logits[: s.n_vocab].float(), dim=-1).numpy()
    assert_probs_close(got.probs, want, logit_scale=largest_logit(s.model, s.corrupted.ids),
                       reduction=model_reduction(s.config), depth=s.config.n_layer + 1)
    assert np.abs(got.probs - unclamped.probs).max() > 1e-4  # the clamps do change the patched run
