"""The session's corrupted prompt and the runs patches read from (model/capture/session_patching.py):
sites kept only when asked for, one cache per head mask, bounded by the memory budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_session
from tests.helpers.patch_references import CLEAN, CORRUPTED
from transformer_viewer.model.capture.interventions import Intervention
from transformer_viewer.model.capture.memory_budget import patch_sources_bytes
from transformer_viewer.model.decoder.hooks import run_with_cache
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
