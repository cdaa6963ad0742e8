"""Per-head and key/value patching on every family of the README's table: each family's tiny
model, loaded from a Hugging Face folder by our reader, patches heads, queries, keys, values
and patterns exactly as the same patch written by hand in a plain forward."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.helpers.families import README_FAMILIES, family_session
from tests.helpers.patch_references import assert_grid_matches_hand_patches
from transformer_viewer.model.analysis.patching.metric import PatchMetric

T = 10


@pytest.mark.parametrize("name", README_FAMILIES)
def test_heads_and_key_value_heads_patch_exactly(name, tmp_path):
    s = family_session(name, tmp_path, T=T)
    ids = list(s.tokens.ids)
    vocab = s.config.vocab_size
    corrupted = [ids[0], ids[1], (ids[2] + 5) % vocab or 3, *ids[3:6], (ids[6] + 11) % vocab or 3, *ids[7:]]
    s.set_corrupted_tokens(dataclasses.replace(s.tokens, ids=tuple(corrupted)))
    logits = s.predict().top_ids
    metric = PatchMetric.make("logit-diff", (int(logits[0]), int(logits[1])))
    for what in ("heads", "q", "k", "v", "pattern"):
        grid = assert_grid_matches_hand_patches(s, what, metric, direction="noise" if what == "k" else "denoise")
        assert torch.isfinite(torch.as_tensor(grid.raw)).all()
    kv = s.config.kv_heads
    grid = assert_grid_matches_hand_patches(s, "v", PatchMetric.make("kl"))
    assert grid.raw.shape == (s.config.n_layer, kv)
    assert (grid.note != "") == (kv < s.config.n_head)
