"""A GPT-2 config.json is untrusted: every value's type is checked before use, so a wrong type is one
CheckpointError line, never a traceback or a silently wrong model (bool("no") is True)."""

from __future__ import annotations

import pytest

from transformer_viewer.model.checkpoints.formats.huggingface import config_from_hf
from transformer_viewer.model.errors import CheckpointError

GOOD = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 2, "n_embd": 8,
        "n_positions": 16, "vocab_size": 50257}


def test_a_good_config_maps_onto_ours():
    c = config_from_hf(dict(GOOD, resid_pdrop=0.1, tie_word_embeddings=False, layer_norm_epsilon=1e-6), "f")
    assert (c.n_layer, c.n_head, c.n_embd, c.block_size) == (2, 2, 8, 16)
    assert c.dropout == 0.1 and c.tie_embeddings is False and c.layer_norm_eps == 1e-6


@pytest.mark.parametrize("key, value, fragment", [
    ("activation_function", ["gelu_new"], "(a list) is not supported"),
    ("tie_word_embeddings", "no", "tie_word_embeddings must be true or false"),
    ("scale_attn_weights", "false", "scale_attn_weights must be true or false"),
    ("resid_pdrop", "0.1", "resid_pdrop must be a finite number"),
    ("layer_norm_epsilon", "1e-5", "layer_norm_epsilon must be a finite number"),
    ("n_layer", 2.0, "n_layer must be an integer"),
    ("n_embd", True, "n_embd must be an integer"),
    ("n_inner", "32", "n_inner must be an integer"),
])
def test_a_value_of_the_wrong_type_is_one_line(key, value, fragment):
    with pytest.raises(CheckpointError) as e:
        config_from_hf(dict(GOOD, **{key: value}), "folder")
    message = str(e.value)
    assert fragment in message and "\n" not in message, message
