"""Hook point names are a public contract (the viewer, scans and users' scripts use them), and a
hook must never outlive the capture that registered it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_loaded
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.decoder.hooks import (
    caching,
    count_hooks,
    find_hook_point,
    hook_points,
    hooks,
    reading,
    run_with_cache,
)

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
    points = hook_points(GPT(CONFIG))
    assert list(points) == TWO_LAYER_HOOKS
    # Each point knows its own name, so one hook serves every point it is registered on.
    assert [p.name for p in points.values()] == TWO_LAYER_HOOKS


def test_hook_points_walk_as_named_modules_does():
    """Parents before children, each module once (a shared point under its first name), the
    model itself when it is a point, and None children skipped."""
    from torch import nn

    from transformer_viewer.model.decoder.hooks import HookPoint

    shared = HookPoint()
    model = nn.Module()
    model.a = nn.Sequential(HookPoint(), nn.Linear(2, 2), shared)
    model.empty = None
    model.b = nn.ModuleDict({"x": shared, "y": nn.Sequential(HookPoint()), "z": HookPoint()})
    want = [name for name, m in model.named_modules() if isinstance(m, HookPoint)]
    assert list(hook_points(model)) == want == ["a.0", "a.2", "b.y.0", "b.z"]
    assert list(hook_points(shared)) == [""]
    llama = GPT(dataclasses.replace(CONFIG, positional="rotary", norm="rmsnorm", mlp="gated", activation="silu",
                                    n_kv_head=2))
    assert list(hook_points(llama)) == [n for n, m in llama.named_modules() if isinstance(m, HookPoint)]


def test_a_point_found_by_name_is_the_walked_one_and_knows_its_name():
    """Registering by name follows the name's path instead of walking the model: the same
    point as the walk's, named when no walk has named it, and nothing but a HookPoint."""
    model = GPT(CONFIG)
    found = {name: find_hook_point(model, name) for name in TWO_LAYER_HOOKS}
    assert [p.name for p in found.values()] == TWO_LAYER_HOOKS  # named on the way, no walk yet
    assert found == hook_points(model)
    for bad in ("blocks.2.hook_resid_pre", "blocks.0.attn", "blocks.0.attn.n_head", "blocks.0.hook_z", "",
                "blocks.0.hook_resid_pre.x"):
        with pytest.raises(KeyError, match="no hook point named"):
            find_hook_point(model, bad)
    with caching(model, ["blocks.1.attn.hook_z", "hook_embed"]) as cache, torch.no_grad():
        model(torch.zeros(1, 3, dtype=torch.long))
    assert set(cache) == {"blocks.1.attn.hook_z", "hook_embed"}
    assert count_hooks(model) == 0


def test_run_with_cache_keeps_the_selected_activations_of_a_plain_forward():
    model = GPT(CONFIG).eval()
    ids = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain, _ = model(ids)
        logits, cache = run_with_cache(model, ids, lambda name: name.endswith("hook_resid_post"))
        _, one = run_with_cache(model, ids, "blocks.0.attn.hook_pattern")
        _, listed = run_with_cache(model, ids, ["hook_final", "blocks.1.mlp.hook_pre"])
    torch.testing.assert_close(logits, plain)
    assert list(cache) == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    # The last block's output through ln_f and the head is the model's own answer.
    torch.testing.assert_close(model.lm_head(model.ln_f(cache["blocks.1.hook_resid_post"])), plain)
    assert list(one) == ["blocks.0.attn.hook_pattern"] and one["blocks.0.attn.hook_pattern"].shape == (2, 4, 7, 7)
    assert sorted(listed) == ["blocks.1.mlp.hook_pre", "hook_final"]
    assert count_hooks(model) == 0
    with pytest.raises(KeyError, match="blocks.5.hook_resid_pre"):
        run_with_cache(model, ids, ["blocks.5.hook_resid_pre"])
    assert count_hooks(model) == 0


def test_a_global_module_hook_sees_every_pattern_of_an_inference_forward():
    """torch's global module hooks expect every module called: with the inference kernels
    installed, where nobody hooks hook_pattern itself, the attention still builds the whole
    pattern for them, the same one a hook of the point's own reads."""
    from transformer_viewer.model.kernels.inference import install_inference

    model = GPT(CONFIG).eval()
    install_inference(model)
    ids = torch.randint(0, 100, (1, 9), generator=torch.Generator().manual_seed(1))
    patterns = {id(point): name for name, point in hook_points(model).items() if name.endswith("hook_pattern")}
    seen = {}

    def keep(module, _inputs, output):
        if id(module) in patterns:
            seen[patterns[id(module)]] = output.clone()

    handle = torch.nn.modules.module.register_module_forward_hook(keep)
    try:
        with torch.inference_mode():
            logits, _ = model(ids)
    finally:
        handle.remove()
    with torch.inference_mode():
        plain, cache = run_with_cache(model, ids, lambda name: name.endswith("hook_pattern"))
    assert sorted(seen) == sorted(cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    # Layer 0 the same bits; later layers within rounding, as a global hook also sends the MLP
    # step by step instead of through its fused product (model/kernels/inference.py).
    assert torch.equal(seen["blocks.0.attn.hook_pattern"], cache["blocks.0.attn.hook_pattern"])
    torch.testing.assert_close(seen["blocks.1.attn.hook_pattern"], cache["blocks.1.attn.hook_pattern"])
    torch.testing.assert_close(logits, plain)


def test_reading_sees_what_an_earlier_hook_returned():
    """Readers run after the hooks of an enclosing block: a norm read under a head mask is the
    masked one."""
    model = GPT(CONFIG).eval()
    seen = []
    zero = [("blocks.0.attn.hook_z", lambda _p, _i, z: torch.zeros_like(z))]
    with torch.no_grad(), hooks(model, zero), reading(model, [("blocks.0.attn.hook_z", seen.append)]), \
            caching(model, "blocks.0.hook_resid_mid") as kept:
        model(torch.zeros(1, 3, dtype=torch.long))
    assert torch.count_nonzero(seen[0]) == 0
    assert set(kept) == {"blocks.0.hook_resid_mid"}
    assert count_hooks(model) == 0


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

    projection = loaded.model.blocks[1].mlp.c_proj

    def broken(_x):
        raise RuntimeError("projection failed")

    projection.forward = broken  # an instance attribute: module calls find it first
    try:
        s = Session(loaded)
        s.set_prompt("The cat")
        with pytest.raises(RuntimeError, match="projection failed"):
            s.run(mask)
    finally:
        del projection.forward
    assert count_hooks(loaded.model) == 0
