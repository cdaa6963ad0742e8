"""The SAE requests on the worker: a load attaches the SAE and says what it is, a cancelled one
attaches nothing, a feature's row is computed once per prompt and reused at every selected
token, and the answers equal model/analysis/sae_features.py's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.window import PROMPT, TINY, make_checkpoint
from transformer_viewer.model.analysis import sae_features
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.errors import Cancelled
from transformer_viewer.viewer.worker import sae as requests
from transformer_viewer.viewer.worker.handlers import WorkerSession

HOOK = "blocks.1.hook_resid_pre"
quiet = lambda *_a, **_k: None  # noqa: E731 - a progress callback that shows nothing
never = lambda: False  # noqa: E731 - a cancel flag never raised


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("sae-requests")
    weights = random_weights("standard", TINY["n_embd"], 48, seed=11)
    weights["W_enc"] *= 4.0
    folder = write_saelens(root / "sae", saelens_cfg("standard", TINY["n_embd"], 48, HOOK), weights)
    return make_checkpoint(root / "tiny.safetensors"), folder


def test_a_load_attaches_the_sae_and_a_cancelled_one_nothing(files):
    ckpt, folder = files
    session = WorkerSession(load_checkpoint(ckpt, device="cpu"))
    with pytest.raises(Cancelled):
        requests.handle_sae_load(session, requests.SaeLoadRequest(spec=folder), quiet, lambda: True)
    assert session.saes == {}
    seen = []
    sae = requests.handle_sae_load(session, requests.SaeLoadRequest(spec=folder), lambda *a: seen.append(a), never)
    assert (sae.index, sae.hook, sae.layer, sae.d_in, sae.d_sae, sae.architecture) == (
        0, HOOK, 1, TINY["n_embd"], 48, "standard")
    assert sae.info == session.sae(0).loaded.info and "48 features" in sae.title
    assert any("KB" in text for _d, _t, text in seen)  # its size said before a weight was read
    assert requests.SaeLoadRequest(spec=folder).kind != requests.SaeLoadRequest(spec=folder + "x").kind


def test_a_features_row_is_computed_once_per_prompt(files, monkeypatch):
    ckpt, folder = files
    session = WorkerSession(load_checkpoint(ckpt, device="cpu"))
    requests.handle_sae_load(session, requests.SaeLoadRequest(spec=folder), quiet, never)
    session.prepare_analysis(PROMPT)
    computed = []
    real = sae_features.feature_row

    def counted(*args, **kwargs):
        computed.append(args[1:3])
        return real(*args, **kwargs)

    monkeypatch.setattr(sae_features, "feature_row", counted)
    feature = 3
    answers = [requests.handle_feature(session, requests.FeatureRequest(text=PROMPT, sae_index=0, feature=feature,
                                                                        position=p), quiet, never) for p in (2, 5)]
    assert computed == [(0, feature)]  # once, though asked at two tokens
    want = real(session, 0, feature)
    for a, p in zip(answers, (2, 5), strict=True):
        np.testing.assert_array_equal(a.row, want)
        assert a.position == p
        assert a.share == sae_features.reconstruction_share(session, 0, feature, p)
        effect = sae_features.feature_logit_effect(session, 0, feature, position=p)
        np.testing.assert_array_equal(a.effect.promoted_ids, effect.promoted_ids)
    session.prepare_analysis(PROMPT + " again")  # another prompt: its own row
    requests.handle_feature(session, requests.FeatureRequest(text=PROMPT + " again", sae_index=0, feature=feature,
                                                             position=1), quiet, never)
    assert len(computed) == 2
