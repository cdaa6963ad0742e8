"""Phi-3's longrope (Phi-3-mini-128k, Phi-3.5-mini, Phi-4-mini): each rotating frequency divided
by its own factor, the short set for prompts up to the original context and the long set, at
every position, for longer prompts. Compared with Hugging Face's Phi3ForCausalLM in both
regimes, in both config forms and under Phi-3's older scaling names."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from tests.helpers.families import assert_logits_and_patterns_match, load_folder
from tests.helpers.hf_family_models import LONGROPE, LONGROPE_ORIGINAL, build, published_form, save
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.families import switches


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    hf = build("phi3_longrope")
    return hf, load_folder(save(hf, str(tmp_path_factory.mktemp("phi3_longrope"))))


def _ids(hf, T: int) -> torch.Tensor:
    return torch.randint(3, hf.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(T))


def test_config_takes_both_factor_sets_and_the_attention_factor(pair):
    _, loaded = pair
    c = loaded.config
    assert c.rope_scaling == "longrope" and c.rope_original_context == LONGROPE_ORIGINAL
    assert c.rope_short_factor == tuple(LONGROPE["short_factor"]) and c.rope_long_factor == tuple(LONGROPE["long_factor"])
    factor = 128 / LONGROPE_ORIGINAL  # max_position_embeddings / original: what Phi-3's configs imply
    assert c.rope_factor == factor
    assert c.rope_attention_factor == pytest.approx(math.sqrt(1 + math.log(factor) / math.log(LONGROPE_ORIGINAL)))
    assert "longrope x8 on 75% of each head" in " ".join(switches(c))


@pytest.mark.parametrize("T", [LONGROPE_ORIGINAL - 4, LONGROPE_ORIGINAL, LONGROPE_ORIGINAL + 1, 2 * LONGROPE_ORIGINAL])
def test_logits_and_patterns_match_on_both_sides_of_the_original_context(pair, T):
    hf, loaded = pair
    assert_logits_and_patterns_match(hf, loaded, _ids(hf, T))


def test_a_longer_prompt_rotates_every_position_by_the_long_factors(pair):
    """The first positions of a prompt over the original context come out differently from the
    same positions of a prompt within it, in Hugging Face's model and in ours alike."""
    hf, loaded = pair
    ids = _ids(hf, LONGROPE_ORIGINAL + 4)
    short = ids[:, :LONGROPE_ORIGINAL]
    with torch.no_grad():
        ours_long, ours_short = loaded.model(ids)[0][0, :LONGROPE_ORIGINAL], loaded.model(short)[0][0]
        hf_long, hf_short = hf(ids).logits[0, :LONGROPE_ORIGINAL], hf(short).logits[0]
    assert (ours_long - ours_short).abs().max().item() > 1e-3  # ten times the parity bound below
    assert (ours_long - hf_long).abs().max().item() <= 1e-4
    assert (ours_short - hf_short).abs().max().item() <= 1e-4


@pytest.mark.parametrize("name", ["longrope", "su", "yarn"])
def test_published_configs_and_older_scaling_names_load_the_same_model(pair, tmp_path, name):
    """Phi-3's published config.json: rope_scaling with a top-level original_max_position_embeddings;
    transformers reads the older names "su" and "yarn" of a Phi-3 config as longrope."""
    hf, native = pair
    folder = save(hf, str(tmp_path))
    published_form(folder)
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["rope_scaling"].pop("original_max_position_embeddings", None)  # as Phi-3.5-mini's file has it
    cfg["rope_scaling"]["type"] = name
    with open(path, "w") as f:
        json.dump(cfg, f)
    loaded = load_folder(folder)
    assert loaded.config == native.config
    ids = _ids(hf, LONGROPE_ORIGINAL + 3)
    with torch.no_grad():
        assert (loaded.model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


def test_own_checkpoint_keeps_the_factors(pair):
    """The factor lists survive our config's JSON round trip (a saved .safetensors keeps them)."""
    _, loaded = pair
    again = GPTConfig.from_dict(json.loads(loaded.config.to_json()))
    assert again == loaded.config and isinstance(again.rope_long_factor, tuple)


@pytest.mark.parametrize("changes, message", [
    (dict(rope_short_factor=(1.0, 2.0)), "rope_short_factor has 2 entries for the 3 rotating pairs"),
    (dict(rope_long_factor=(1.0, float("nan"), 1.0)), "rope_long_factor must be a list of positive numbers"),
    (dict(rope_original_context=0), "rope_scaling 'longrope' needs rope_original_context"),
])
def test_bad_longrope_fields_are_one_line_value_errors(pair, changes, message):
    _, loaded = pair
    with pytest.raises(ValueError, match=message):
        loaded.config.replace(**changes)
