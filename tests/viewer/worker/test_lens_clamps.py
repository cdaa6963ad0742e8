"""The logit lens of a run whose only change is a feature clamp (no head masked): the rows before
the SAE's layer are the clean lens's, the rest the lens of the clamped run's residual streams."""

from __future__ import annotations

import numpy as np

from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.window import PROMPT, TINY, make_checkpoint
from transformer_viewer.model.analysis.lens import logit_lens
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.sae.loading import load_sae
from transformer_viewer.viewer.worker.handlers import WorkerSession
from transformer_viewer.viewer.worker.lens import LensRequest, handle_lens

HOOK = "blocks.0.hook_resid_post"  # changes resid_pre of layer 1 on: lens rows 1.pre and final


def test_the_lens_of_a_clamp_alone_is_the_clamped_runs(tmp_path):
    weights = random_weights("standard", TINY["n_embd"], 48, seed=5)
    weights["W_enc"] *= 4.0
    folder = write_saelens(tmp_path / "sae", saelens_cfg("standard", TINY["n_embd"], 48, HOOK), weights)
    session = WorkerSession(load_checkpoint(make_checkpoint(tmp_path / "tiny.safetensors")))
    session.ensure_prompt(PROMPT)
    session.attach_sae(load_sae(folder, session.config))
    change = Intervention.make(session.config, None, clamps=(FeatureClamp(0, 5, "set", 40.0),))

    result = handle_lens(session, LensRequest(text=PROMPT, intervention=change), lambda *_a: None, lambda: False)
    whole = logit_lens(session, session.masked_residuals(change), reference_ids=result.clean.top_ids)
    for name in ("top_ids", "top_probs", "final_ranks", "final_probs", "reference_ids", "reference_probs"):
        assert np.array_equal(getattr(result.lens, name), getattr(whole, name)), name
    assert np.array_equal(result.lens.top_probs[0], result.clean.top_probs[0])  # the embedding: before the SAE
    assert not np.array_equal(result.lens.top_probs[1:], result.clean.top_probs[1:])
    assert np.abs(result.diff[1:]).max() > 0
