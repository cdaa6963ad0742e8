"""The model that ships in assets/: what its model card promises, measured on the file itself.

These load the real 15 MB checkpoint, so they run in a few seconds, not milliseconds.
"""

import json
import os
import re
from importlib import resources

import numpy as np
import pytest

from transformer_viewer.model.analysis.heads import detect_heads
from transformer_viewer.model.capture.prompts import example_prompts
from transformer_viewer.model.checkpoints.checkpoint import bundled_checkpoint_path, load_checkpoint
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def bundled():
    return load_checkpoint(bundled_checkpoint_path(), device="cpu")


@pytest.fixture(scope="module")
def scores(bundled):
    from transformer_viewer.model.capture.session import Session

    return detect_heads(Session(bundled))


def test_it_has_a_previous_token_head(scores):
    layer, head, value = scores.best("previous_token")
    assert value >= 0.5, f"best previous-token head {layer}.{head} scores only {value:.3f}"


def test_the_first_example_shows_that_head(scores):
    """The window opens on the first example prompt and the head it names: the previous-token head."""
    layer, head, _ = scores.best("previous_token")
    assert example_prompts()[0].head == (layer, head)


def test_it_beats_the_unigram_by_two_and_a_quarter_nats(bundled):
    """The card's margin is 2.285 nats: the 2.3 aimed for is not reached (MODEL.md says so)."""
    t = bundled.training
    assert t["final_val_loss"] <= t["unigram_val_loss"] - 2.25
    assert {f["path"] for f in t["data"]} == {"shakespeare.txt.xz", "kjv.txt.xz"}


def test_it_is_a_rotary_model_under_16_mb(bundled):
    c = bundled.config
    assert c.positional == "rotary" and c.norm == "rmsnorm"
    assert os.path.getsize(bundled_checkpoint_path()) < 16 * 1024 * 1024


def test_the_model_card_quotes_the_measured_scores(scores, bundled):
    """MODEL.md's head table is this file's `heads` output, not an older model's."""
    card = resources.files("transformer_viewer.assets").joinpath("MODEL.md").read_text()
    layer, head, value = scores.best("previous_token")
    row = re.search(rf"^\s+{layer}\s+{head}\s+([0-9.]+)", card, re.MULTILINE)
    assert row is not None and abs(float(row.group(1)) - value) < 5e-4
    assert f"{bundled.training['final_val_loss']:.3f}" in card
    assert f"{bundled.n_params:,}" in card


def test_example_prompts_fit_its_context(bundled):
    tok = Tokenizer()
    for p in example_prompts():
        assert len(tok.encode(p.text)) <= bundled.config.block_size, p.title


def test_it_predicts_the_obvious_continuation(bundled):
    """A formula the training text repeats hundreds of times is completed."""
    from transformer_viewer.model.capture.session import Session

    session = Session(bundled)
    session.set_prompt("And the LORD spake unto Moses, saying")
    nxt = session.predict()
    tok = Tokenizer()
    top = [tok.enc.decode([int(i)]) for i in nxt.top_ids[:3]]
    assert "," in top, top
    assert np.isclose(float(nxt.probs.sum()), 1.0, atol=1e-4)


def test_its_metadata_is_json_with_the_command(bundled):
    command = bundled.training["command"]
    assert command[:2] == ["transformer-viewer", "train"] and "--seed" in command
    json.dumps(bundled.training)  # what `info --json` prints
