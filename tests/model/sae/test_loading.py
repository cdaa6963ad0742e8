"""Where SAEs come from and what their files say beside the weights: the Hugging Face cache,
TransformerLens's processing, the warnings, labels, and a load's progress and cancel."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.helpers.hf_hub import cache_entry
from tests.helpers.models import TINY, scaled_init_loaded
from tests.helpers.saes import random_weights, saelens_cfg, write_npz, write_saelens
from transformer_viewer.model.analysis.sae_features import feature_row
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.hooks import run_with_cache
from transformer_viewer.model.errors import Cancelled, ModelError
from transformer_viewer.model.sae.labels import read_feature_labels
from transformer_viewer.model.sae.loading import load_sae, parse_sae_spec, past_context

HOOK = "blocks.1.hook_resid_pre"


def test_parse_sae_spec():
    assert parse_sae_spec("a/b/params.npz@blocks.3.hook_resid_post") == ("a/b/params.npz", "blocks.3.hook_resid_post")
    assert parse_sae_spec("me@host/sae") == ("me@host/sae", None)
    assert parse_sae_spec("org/repo/layer_3") == ("org/repo/layer_3", None)


def test_a_cached_repository_subfolder_is_found_and_never_downloaded(tmp_path, monkeypatch):
    src = tmp_path / "repo"
    write_saelens(src / "layer_1", saelens_cfg("standard", 32, 16, HOOK), random_weights("standard", 32, 16))
    write_npz(src / "gemma" / "width_16" / "params.npz", random_weights("jumprelu", 32, 16))
    hub = tmp_path / "hub"
    cache_entry(hub, "org/saes", str(src))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert load_sae("org/saes/layer_1", TINY).config.hook == HOOK
    loaded = load_sae("org/saes/gemma/width_16@blocks.0.hook_resid_post", TINY)
    assert loaded.config.architecture == "jumprelu"
    with pytest.raises(ModelError, match="never downloads"):
        load_sae("org/saes/layer_9", TINY)


def _centred_session(tmp_path, norm="layernorm"):
    config = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=64, norm=norm)
    s = Session(scaled_init_loaded(config))
    s.set_prompt("The quick brown fox jumps over the lazy dog")
    w = random_weights("standard", 32, 16, seed=5)
    cfg = saelens_cfg("standard", 32, 16, HOOK, model_from_pretrained_kwargs={"center_writing_weights": True,
                                                                               "fold_ln": True})
    loaded = load_sae(write_saelens(tmp_path / norm, cfg, w), config)
    return s, loaded, {k: torch.from_numpy(v).double() for k, v in w.items()}


def test_center_writing_weights_centres_the_residual_on_a_layernorm_model(tmp_path):
    s, loaded, w = _centred_session(tmp_path)
    assert loaded.config.processing == ("center residual",) and "center residual" in loaded.info
    index = s.attach_sae(loaded)
    with torch.no_grad():
        _, cache = run_with_cache(s.model, torch.tensor([s.tokens.ids]), [HOOK])
    x = cache[HOOK][0].double()
    x = x - x.mean(-1, keepdim=True)  # TransformerLens's residual stream
    want = torch.relu((x - w["b_dec"]) @ w["W_enc"] + w["b_enc"])[:, 3]
    np.testing.assert_allclose(feature_row(s, index, 3), want.numpy(), rtol=1e-4, atol=1e-4)


def test_rmsnorm_models_are_not_centred_as_transformer_lens_skips_them(tmp_path):
    _s, loaded, _w = _centred_session(tmp_path, "rmsnorm")
    assert loaded.config.processing == () and "no processing" in loaded.info


def test_warnings_model_name_unknown_processing_and_context(tmp_path):
    cfg = saelens_cfg("standard", 32, 16, HOOK, model_name="gpt2-small", context_size=8)
    loaded = load_sae(write_saelens(tmp_path / "a", cfg, random_weights("standard", 32, 16)), TINY, model_name="tiny")
    assert any("trained on gpt2-small, not tiny" in w for w in loaded.warnings)
    assert any("does not say how TransformerLens processed" in w for w in loaded.warnings)
    assert "8 the SAE was trained on" in past_context(loaded.config, 9) and past_context(loaded.config, 8) is None
    same = load_sae(str(tmp_path / "a"), TINY, model_name="openai-community/gpt2")
    assert not any("trained on" in w for w in same.warnings)  # TransformerLens's gpt2-small is gpt2


def test_progress_then_cancel(tmp_path):
    folder = write_saelens(tmp_path / "a", saelens_cfg("standard", 32, 16, HOOK), random_weights("standard", 32, 16))
    heard = []
    load_sae(folder, TINY, progress=lambda done, total, text: heard.append((done, total, text)))
    assert heard[0][0] == 0 and "KB in float32" in heard[0][2] and heard[-1][:2] == (4, 4)
    with pytest.raises(Cancelled):
        load_sae(folder, TINY, is_cancelled=lambda: True)


def test_labels_from_csv_and_a_neuronpedia_export(tmp_path):
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text('id,label\n3,"dogs, cats"\n7,  the year\n3,later\n')
    assert read_feature_labels(str(csv_path), 16) == {3: "dogs, cats", 7: "the year"}
    export = [{"modelId": "gpt2-small", "layer": "0-res-jb", "index": "5", "description": " numbers"},
              {"index": 9, "description": "code"}]
    json_path = tmp_path / "explanations.json"
    json_path.write_text(json.dumps(export))
    assert read_feature_labels(str(json_path), 16) == {5: "numbers", 9: "code"}


def test_an_sae_of_a_hugging_face_model_names_its_layer_and_needs_no_processing(tmp_path):
    cfg = saelens_cfg("standard", 32, 16, "model.layers.1", model_class_name="AutoModelForCausalLM",
                      model_from_pretrained_kwargs={"torch_dtype": "float32"})
    cfg["metadata"]["model_class_name"] = cfg.pop("model_class_name")
    loaded = load_sae(write_saelens(tmp_path / "hf", cfg, random_weights("standard", 32, 16)), TINY)
    assert loaded.config.hook == "blocks.1.hook_resid_post" and loaded.config.processing == ()
    assert not loaded.warnings


def test_hook_z_and_mlp_neuron_saes_read_their_widths(tmp_path):
    z = load_sae(write_saelens(tmp_path / "z", saelens_cfg("standard", 32, 16, "blocks.0.attn.hook_z"),
                               random_weights("standard", 32, 16)), TINY)
    assert z.config.processing == ()  # nothing asked of TransformerLens: hook_z as computed
    with pytest.raises(ModelError, match=r"mlp.hook_post of this model is 128 wide"):
        load_sae(write_saelens(tmp_path / "n", saelens_cfg("standard", 32, 16, "blocks.0.mlp.hook_post"),
                               random_weights("standard", 32, 16)), TINY)
