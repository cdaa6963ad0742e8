"""Dynamic NTK rope scaling: within max_position_embeddings the plain rotary; past it, a base
grown for the prompt's length. Compared with Hugging Face's models on both sides of that length,
in both config forms, for a full-rotary Llama and a partial-rotary Pythia. Hugging Face's
rotary keeps the grown frequencies after a long prompt; every comparison here runs on a model
fresh from its folder, the state each of our prompts is computed in."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from tests.helpers.families import assert_logits_and_patterns_match, load_folder, session_on
from tests.helpers.hf_family_models import build, published_form, save
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.families import switches
from transformer_viewer.model.decoder.rotary import inverse_frequencies

ORIGINAL, FACTOR = 16, 2.5
SHARPEN = 8.0
DYNAMIC = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": FACTOR}
MODELS = {
    "llama": dict(rope_parameters=DYNAMIC, max_position_embeddings=ORIGINAL),
    "pythia": dict(rope_parameters=dict(DYNAMIC, partial_rotary_factor=0.5), max_position_embeddings=ORIGINAL),
}


def fresh(name: str):
    """The family's tiny dynamic-rope model as just loaded: same seed, same weights, no rotary
    history. Its queries and keys are scaled up so that the patterns are sharp and the angles
    show in the logits (at the random initialisation every pattern is nearly flat)."""
    hf = build(name, **MODELS[name])
    with torch.no_grad():
        for key, p in hf.named_parameters():
            if any(part in key for part in ("q_proj.weight", "k_proj.weight", "query_key_value.weight")):
                p.mul_(SHARPEN)
    return hf


@pytest.fixture(scope="module", params=sorted(MODELS))
def pair(request, tmp_path_factory):
    name = request.param
    return name, load_folder(save(fresh(name), str(tmp_path_factory.mktemp(name))))


def _ids(T: int) -> torch.Tensor:
    return torch.randint(3, 96, (1, T), generator=torch.Generator().manual_seed(T))


def test_config_and_context(pair):
    """The original context is max_position_embeddings; the prompt may be factor times longer."""
    _, loaded = pair
    c = loaded.config
    assert (c.rope_scaling, c.rope_factor, c.rope_original_context) == ("dynamic", FACTOR, ORIGINAL)
    assert c.block_size == int(ORIGINAL * FACTOR)
    assert f"dynamic x{FACTOR:g}" in " ".join(switches(c))
    assert GPTConfig.from_dict(json.loads(c.to_json())) == c  # our own checkpoints keep it


@pytest.mark.parametrize("T", [ORIGINAL - 4, ORIGINAL, ORIGINAL + 1, int(ORIGINAL * FACTOR)])
def test_logits_and_patterns_match_on_both_sides_of_the_original_context(pair, T):
    name, loaded = pair
    assert_logits_and_patterns_match(fresh(name), loaded, _ids(T))


# 25 and 32: lengths where the Llama model's frequencies computed in Python floats would differ
# from transformers' float32 ones in the last bit.
@pytest.mark.parametrize("T", [ORIGINAL, ORIGINAL + 1, 25, 2 * ORIGINAL, int(ORIGINAL * FACTOR)])
def test_frequencies_are_hugging_faces_bit_for_bit(pair, T):
    """The inverse frequencies a T-token prompt rotates by equal those Hugging Face's rotary holds
    after its forward of that prompt (Python floats at the original context, float32 past it)."""
    name, loaded = pair
    hf = fresh(name)
    with torch.no_grad():
        hf(_ids(T))
    rotary = (hf.model if name == "llama" else hf.gpt_neox).rotary_emb
    c = loaded.config
    assert torch.equal(inverse_frequencies(c, c.rope_base, "dynamic", T=T)[0], rotary.inv_freq)


def test_a_longer_prompt_rotates_every_position_by_its_own_base(pair):
    """The first positions of a prompt past the original context attend otherwise than the same
    positions of a prompt within it, in Hugging Face's model and in ours alike; two long prompts
    of different lengths differ again."""
    name, loaded = pair
    ids = _ids(2 * ORIGINAL)
    lengths = (ORIGINAL, ORIGINAL + 8, 2 * ORIGINAL)
    ours, theirs = [], []
    for n in lengths:  # layer 0's pattern among the first ORIGINAL tokens
        ours.append(session_on(loaded, ids[:, :n]).run().attention[0][:, :ORIGINAL, :ORIGINAL])
        with torch.no_grad():
            theirs.append(fresh(name)(ids[:, :n], output_attentions=True).attentions[0][0, :, :ORIGINAL, :ORIGINAL].numpy())
    for a, b in ((0, 1), (1, 2)):
        assert np.abs(ours[a] - ours[b]).max() > 1e-3  # a hundred times the parity bound below
    for o, t in zip(ours, theirs, strict=True):
        assert np.abs(o - t).max() <= 1e-5


def test_prediction_and_recompute_use_the_prompts_own_base(pair):
    """A head toggle's incremental recompute and a full recompute agree past the original context
    (both rotate by the base of the prompt's length, not of whatever ran before)."""
    _, loaded = pair
    ids = _ids(ORIGINAL + 9)
    s = session_on(loaded, ids)
    s.run()
    mask = np.zeros((loaded.config.n_layer, loaded.config.n_head), dtype=bool)
    mask[-1, 0] = True
    fast = s.predict(mask).probs
    with torch.no_grad():
        loaded.model(_ids(2 * ORIGINAL))  # another length in between, with frequencies of its own
    full = session_on(loaded, ids).run(mask).next.probs
    assert np.abs(fast - full).max() <= 1e-6


def test_published_config_loads_the_same_model(pair, tmp_path):
    """rope_scaling {"type": "dynamic", "factor": ...} beside rope_theta (NeoX: rotary_emb_base)."""
    name, native = pair
    folder = save(fresh(name), str(tmp_path))
    published_form(folder)
    with open(os.path.join(folder, "config.json")) as f:
        assert json.load(f)["rope_scaling"]["type"] == "dynamic"
    assert load_folder(folder).config == native.config


@pytest.mark.parametrize("changes, message", [
    (dict(rope_original_context=0), "rope_scaling 'dynamic' needs rope_original_context"),
    (dict(head_dim=2, rotary_pct=1.0), "dynamic rope scaling needs 4 or more rotating dimensions per head, got 2"),
])
def test_bad_dynamic_fields_are_one_line_value_errors(pair, changes, message):
    _, loaded = pair
    with pytest.raises(ValueError, match=message):
        loaded.config.replace(**changes)


@pytest.mark.parametrize("name", ["mistral", "qwen3", "olmo2", "gemma2", "smollm3", "phi"])
def test_every_family_reading_the_shared_rope_settings_extends_its_context(name, tmp_path):
    """Each family's reader takes dynamic scaling with the longer context, and the model agrees
    with Hugging Face's past the original one."""
    over = dict(DYNAMIC, partial_rotary_factor=0.5) if name == "phi" else DYNAMIC
    hf = build(name, rope_parameters=over, max_position_embeddings=ORIGINAL)
    loaded = load_folder(save(hf, str(tmp_path)))
    assert (loaded.config.rope_scaling, loaded.config.block_size) == ("dynamic", int(ORIGINAL * FACTOR))
    assert_logits_and_patterns_match(hf, loaded, _ids(int(ORIGINAL * FACTOR)))
