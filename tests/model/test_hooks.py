"""Hook point names are a public contract (the viewer, scans and users' scripts use them), and a
hook must never outlive the capture that registered it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model.checkpoint_common import tiny_loaded
from transformer_viewer.model.capture import Session
from transformer_viewer.model.config import GPTConfig
from transformer_viewer.model.gpt import GPT
from transformer_viewer.model.hooks import count_hooks, hook_points, hooks

BLOCK_HOOKS = [
    "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_rot_q", "attn.hook_rot_k", "attn.hook_pattern",
    "attn.hook_z", "mlp.hook_pre", "mlp.hook_post",
    "hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post",
]
TWO_LAYER_HOOKS = (
    [f"blocks.{layer}.{h}" for layer in range(2) for h in BLOCK_HOOKS]
    + ["hook_embed", "hook_pos_embed", "hook_final"]
)
CONFIG = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=64, vocab_size=50257)


def test_hook_names_of_a_two_layer_model():
    assert list(hook_points(GPT(CONFIG))) == TWO_LAYER_HOOKS


def test_hook_shapes():
    model = GPT(CONFIG).eval()
    B, T, nh, hs, C, M = 2, 7, 4, 8, 32, 128
    expected = {
        "hook_embed": (B, T, C), "hook_pos_embed": (B, T, C), "hook_final": (B, T, C),
        "attn.hook_q": (B, T, nh, hs), "attn.hook_k": (B, T, nh, hs), "attn.hook_v": (B, T, nh, hs),
        "attn.hook_rot_q": (B, T, nh, hs), "attn.hook_rot_k": (B, T, nh, hs), "attn.hook_pattern": (B, nh, T, T), "attn.hook_z": (B, T, nh, hs),
        "mlp.hook_pre": (B, T, M), "mlp.hook_post": (B, T, M),
        "hook_resid_pre": (B, T, C), "hook_attn_out": (B, T, C), "hook_resid_mid": (B, T, C),
        "hook_mlp_out": (B, T, C), "hook_resid_post": (B, T, C),
    }
    seen = {}

    def record(name):
        def hook(_m, _i, out):
            seen[name] = tuple(out.shape)
        return hook

    with hooks(model, [(n, record(n)) for n in TWO_LAYER_HOOKS]), torch.no_grad():
        model(torch.zeros(B, T, dtype=torch.long))
    assert set(seen) == set(TWO_LAYER_HOOKS)
    for name, shape in seen.items():
        assert shape == expected[name.split(".", 2)[-1] if name.startswith("blocks.") else name], name


def test_pattern_rows_are_causal_distributions():
    model = GPT(CONFIG).eval()
    got = []
    with hooks(model, [("blocks.1.attn.hook_pattern", lambda _m, _i, out: got.append(out.clone()))]), torch.no_grad():
        model(torch.randint(0, 100, (1, 9)))
    p = got[0][0]  # (nh, T, T)
    torch.testing.assert_close(p.sum(-1), torch.ones(4, 9))
    assert torch.all(p.triu(1) == 0)


def test_hooks_are_removed_after_the_block_and_after_an_exception():
    model = GPT(CONFIG).eval()
    with hooks(model, [("hook_embed", lambda *a: None), ("blocks.0.hook_resid_mid", lambda *a: None)]):
        assert count_hooks(model) == 2
    assert count_hooks(model) == 0

    def explode(*_a):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        with hooks(model, [("blocks.1.mlp.hook_post", explode)]), torch.no_grad():
            model(torch.zeros(1, 3, dtype=torch.long))
    assert count_hooks(model) == 0


def test_an_unknown_name_registers_nothing():
    model = GPT(CONFIG).eval()
    with pytest.raises(KeyError, match="blocks.9.hook_resid_pre"):
        with hooks(model, [("hook_embed", lambda *a: None), ("blocks.9.hook_resid_pre", lambda *a: None)]):
            pass
    assert count_hooks(model) == 0


def test_capture_leaves_no_hooks_even_when_the_forward_fails():
    loaded = tiny_loaded()
    session = Session(loaded)
    session.set_prompt("The cat sat on the mat")
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 2] = True
    session.run(mask)
    session.predict(mask, ablation="mean")
    assert count_hooks(loaded.model) == 0

    mlp = loaded.model.blocks[1].mlp
    original = mlp.act

    def broken(_x):
        raise RuntimeError("activation failed")

    mlp.act = broken
    try:
        s = Session(loaded)
        s.set_prompt("The cat")
        with pytest.raises(RuntimeError, match="activation failed"):
            s.run(mask)
    finally:
        mlp.act = original
    assert count_hooks(loaded.model) == 0
