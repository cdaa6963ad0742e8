"""The Intervention value: checked once where it is made, equal and hashed by value, so the
session's caches hit on an equal value made anew and miss on a changed one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers.interventions import count_makes
from tests.helpers.models import tiny_loaded
from transformer_viewer.model.analysis.scan import head_scan
from transformer_viewer.model.capture.interventions import ABLATIONS, Intervention
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import ModelError

CONFIG = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=32, vocab_size=50257)
PROMPT = "The cat sat on the mat because"


@pytest.fixture(scope="module")
def loaded():
    return tiny_loaded(CONFIG, seed=5)


def heads(*pairs) -> np.ndarray:
    m = np.zeros((CONFIG.n_layer, CONFIG.n_head), dtype=bool)
    for layer, h in pairs:
        m[layer, h] = True
    return m


def test_make_checks_the_shape_and_the_ablation_and_keeps_its_own_read_only_copy():
    source = heads((0, 0))
    change = Intervention.make(CONFIG, source, "mean")
    assert change.mask.dtype == bool and change.mask.shape == (2, 4) and change.mask.sum() == 1
    source[1, 1] = True  # the caller's array changes later: the value does not
    assert change.mask.sum() == 1
    with pytest.raises(ValueError):
        change.mask[0, 1] = True  # read-only
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.ablation = "zero"
    assert not Intervention.none(CONFIG).mask.any() and Intervention.none(CONFIG).ablation == "zero"
    with pytest.raises(ModelError, match="ablation must be one of zero, mean, got 'half'"):
        Intervention.make(CONFIG, None, "half")
    with pytest.raises(ModelError, match=r"base mask has shape \(4, 2\); this model needs \(2, 4\)"):
        Intervention.make(CONFIG, np.zeros((4, 2)), "zero", what="base mask")
    with pytest.raises(TypeError, match="Intervention.make"):
        Intervention(np.zeros((2, 4), bool), "zero")  # only through the one constructor


def test_equal_values_are_equal_and_hash_alike_whatever_array_they_came_from():
    a = Intervention.make(CONFIG, heads((1, 2)), "zero")
    b = Intervention.make(CONFIG, [[False] * 4, [False, False, True, False]], "zero")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Intervention.make(CONFIG, heads((1, 2)), "mean")
    assert a != Intervention.make(CONFIG, heads((1, 3)), "zero")
    assert a != Intervention.make(GPTConfig(n_layer=4, n_head=2, n_embd=32), heads((1, 2)).reshape(4, 2), "zero")
    assert a.with_head(0, 1) == Intervention.make(CONFIG, heads((1, 2), (0, 1)), "zero")
    assert a.mask.sum() == 1  # with_head made a new value


def test_reading_it():
    change = Intervention.make(CONFIG, heads((1, 2), (0, 3)), "zero")
    assert change.describe() == "heads 0.3, 1.2 (zero)"
    assert Intervention.make(CONFIG, heads((1, 0)), "mean").describe() == "head 1.0 (mean)"
    assert Intervention.none(CONFIG).describe() == "no intervention" and Intervention.none(CONFIG).is_empty
    assert not change.is_empty and change.n_masked == 2
    none = Intervention.none(CONFIG)
    assert change.first_changed_layer(none) == 0
    assert Intervention.make(CONFIG, heads((1, 2)), "zero").first_changed_layer(none) == 1
    # Only the ablation differs: the first layer with a masked head computes differently.
    assert Intervention.make(CONFIG, heads((1, 2)), "mean").first_changed_layer(
        Intervention.make(CONFIG, heads((1, 2)), "zero")) == 1
    assert change.first_changed_layer(change) == CONFIG.n_layer
    assert [name for name, _ in change.hooks()] == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    assert [name for name, _ in change.hooks(1)] == ["blocks.1.attn.hook_z"]
    assert set(ABLATIONS) == {"zero", "mean"}


def test_the_session_cache_hits_on_an_equal_value_made_anew_and_misses_on_a_changed_one(loaded):
    s = Session(loaded)
    s.set_prompt(PROMPT)
    first = s.run(Intervention.make(CONFIG, heads((1, 1)), "zero"))
    again = s.run(Intervention.make(CONFIG, heads((1, 1)), "zero"))
    assert again.first_layer_run == CONFIG.n_layer  # nothing rerun: the cached run is current
    np.testing.assert_array_equal(again.next.probs, first.next.probs)
    other = s.run(Intervention.make(CONFIG, heads((1, 1)), "mean"))
    assert other.first_layer_run == 1  # the ablation changed: rerun from the masked layer
    assert other.intervention == Intervention.make(CONFIG, heads((1, 1)), "mean")


def test_a_value_made_for_another_model_is_refused(loaded):
    s = Session(loaded)
    s.set_prompt(PROMPT)
    with pytest.raises(ModelError, match=r"head mask has shape \(4, 2\); this model needs \(2, 4\)"):
        s.run(Intervention.none(GPTConfig(n_layer=4, n_head=2, n_embd=32)))


@pytest.fixture
def makes(monkeypatch):
    """How many times Intervention.make runs (each time, the one check)."""
    return count_makes(monkeypatch)


def test_a_run_a_prediction_and_a_scan_check_once_per_request(loaded, makes):
    s = Session(loaded)
    s.set_prompt(PROMPT)
    makes.clear()  # the session's own clean Intervention, made once with it
    change = Intervention.make(CONFIG, heads((0, 2)), "mean")
    assert len(makes) == 1
    s.run(change)
    s.predict(change, position=3, update_cache=False)
    s.predict(change)
    s.masked_residuals(change)
    head_scan(s, intervention=change)
    assert len(makes) == 1  # every one took the value as it was made
    s.run(heads((1, 0)), "zero")  # a script's bare mask: made into a value once
    assert len(makes) == 2
