"""The decoder's family switches: the installed blocked attention equals the decoder's plain
attention with a sliding window, soft-capping, a custom scale, grouped-query heads and rotary
positions (to the last bits of float32 rounding: the GEMM may sum a block of rows in another
order than the whole matrix on some CPUs), and its forms (in the shared workspace or not, the
pattern hooked or not) agree bit for bit; each switch computes what its definition says; bad
config values are one line."""

import math

import pytest
import torch

from tests.helpers.family_switches import BASE, VARIANTS, switch_model
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.decoder.rotary import Rotary
from transformer_viewer.model.kernels.attention_kernels import QUERY_BLOCK
from transformer_viewer.model.kernels.inference import choose_strategy, install_inference


def _patterns(model, ids, scratch=None):
    """Each layer's pattern, read by a hook, and the logits, without autograd."""
    kept = {}
    named = [(f"blocks.{i}.attn.hook_pattern", lambda _m, _i, out, i=i: kept.__setitem__(i, out.detach().clone()))
             for i in range(model.config.n_layer)]
    with torch.no_grad(), hooks(model, named):
        if scratch is None:
            logits = model(ids)[0]
        else:
            with scratch.scratch_patterns():
                logits = model(ids)[0]
    return kept, logits.detach()


def _blocked(model):
    """The blocked attention installed on `model`, on torch's GEMM so only the attention differs."""
    return install_inference(model, choose_strategy(model, {"TV_GEMM": "torch"}))


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("T", [7, QUERY_BLOCK + 1, 3 * QUERY_BLOCK + 16])
def test_blocked_attention_is_bit_identical_for_every_switch(name, T):
    model = switch_model(name)
    ids = torch.randint(0, 300, (2, T), generator=torch.Generator().manual_seed(T))
    full, logits_full = _patterns(model, ids)  # the decoder's plain attention
    installed = _blocked(model)
    blocked, logits_blocked = _patterns(model, ids)
    ws_patterns, logits_ws = _patterns(model, ids, scratch=installed)
    with torch.no_grad():
        logits_unread = model(ids)[0]  # nobody reads the pattern: one block of rows at a time
    for layer in full:
        # Probabilities in [0, 1] from scores that are sums of a few products: a changed summation
        # order moves them by a few float32 ulps (5.6e-9 seen on an AMD EPYC, 0 on an Intel Xeon);
        # a wrong mask, scale or cap moves them by far more than 1e-6.
        torch.testing.assert_close(blocked[layer], full[layer], rtol=1e-5, atol=1e-6)
        assert torch.equal(ws_patterns[layer], blocked[layer])  # capture and prediction paths: same bits
        assert torch.equal(torch.triu(blocked[layer], 1), torch.zeros_like(blocked[layer]))
    torch.testing.assert_close(logits_blocked, logits_full, rtol=1e-5, atol=1e-5)
    assert torch.equal(logits_blocked, logits_ws)
    assert torch.equal(logits_blocked, logits_unread)


def test_sliding_window_sees_exactly_its_window():
    model = switch_model("window_softcap")
    T, window = 100, 37
    _blocked(model)
    pats, _ = _patterns(model, torch.randint(0, 300, (1, T)))
    q = torch.arange(T)[:, None]
    k = torch.arange(T)[None, :]
    visible = (k <= q) & (k > q - window)
    assert torch.all(pats[0][0][:, ~visible] == 0) and torch.all(pats[0][0][:, visible] > 0)  # layer 0 slides
    assert torch.all(pats[1][0][:, (k <= q)] > 0)  # layer 1 is full


def test_gqa_key_heads_are_shared_by_query_groups():
    model = switch_model("llama_gqa")
    got = {}
    with hooks(model, [("blocks.0.attn.hook_rot_k", lambda _m, _i, out: got.__setitem__("k", out)),
                       ("blocks.0.attn.hook_v", lambda _m, _i, out: got.__setitem__("v", out))]), torch.no_grad():
        model(torch.randint(0, 300, (1, 9)))
    assert got["k"].shape == (1, 9, 2, 8) and got["v"].shape == (1, 9, 2, 8)


def test_rotary_rotates_pairs_by_position_and_keeps_norms():
    for style, pair in (("neox", (0, 4)), ("gptj", (0, 1))):
        config = GPTConfig(**{**BASE, "n_head": 4, "positional": "rotary", "rotary_style": style})  # head size 8
        x = torch.zeros(1, 3, 1, 8)
        x[..., pair[0]] = 1.0
        out = Rotary(config, 10000.0, "none")(x)
        for t in range(3):  # the first pair turns by t radians (inverse frequency 1)
            assert out[0, t, 0, pair[0]].item() == pytest.approx(math.cos(t), abs=1e-6)
            assert out[0, t, 0, pair[1]].item() == pytest.approx(math.sin(t), abs=1e-6)
        torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))


def test_nope_layers_leave_queries_and_keys_unrotated():
    model = switch_model("nope_longrope")
    got = {}
    named = [(f"blocks.{i}.attn.{h}", lambda _m, _i, out, key=(i, h): got.__setitem__(key, out.detach().clone()))
             for i in range(2) for h in ("hook_q", "hook_rot_q", "hook_k", "hook_rot_k")]
    with torch.no_grad(), hooks(model, named):
        model(torch.randint(0, 300, (1, 9)))
    for h in ("q", "k"):
        assert not torch.equal(got[0, f"hook_{h}"], got[0, f"hook_rot_{h}"])  # layer 0 rotates
        assert torch.equal(got[1, f"hook_{h}"], got[1, f"hook_rot_{h}"])  # layer 1 is a NoPE layer


def test_defaults_are_gpt2_and_old_configs_load():
    c = GPTConfig.from_dict({"n_layer": 1, "n_head": 2, "n_embd": 8, "block_size": 4, "vocab_size": 10})
    assert (c.norm, c.positional, c.mlp, c.block, c.kv_heads, c.head_size) == ("layernorm", "learned", "plain",
                                                                               "sequential", 2, 4)
    assert GPTConfig.from_dict(c.to_dict()) == c
    for name in ("window_softcap", "nope_longrope"):
        v = GPTConfig(**BASE, **VARIANTS[name])
        assert GPTConfig.from_dict(v.to_dict()) == v


@pytest.mark.parametrize("changes, message", [
    ({"n_kv_head": 3}, "n_kv_head"),
    ({"n_kv_head": True}, "n_kv_head must be an integer"),
    ({"head_dim": "8"}, "head_dim must be an integer"),
    ({"rope_base": "10000"}, "rope_base must be a finite number"),
    ({"rope_base": float("inf")}, "rope_base must be a finite number"),
    ({"attn_softcap": -1.0}, "attn_softcap must be in"),
    ({"layer_norm_eps": True}, "layer_norm_eps must be a finite number"),
    ({"norm_offset": 1}, "norm_offset must be true or false"),
    ({"qkv_bias": "yes"}, "qkv_bias must be true, false or null"),
    ({"norm": "batchnorm"}, "norm must be one of"),
    ({"positional": "rotary", "rotary_pct": 0.1}, "rotating dimensions"),
    ({"rope_scaling": "llama3", "positional": "rotary"}, "rope_original_context"),
    ({"layer_types": ("full",)}, "layer_types has 1 entries"),
    ({"layer_types": ("full", "local")}, "layer_types entries"),
    ({"block_size": 1 << 17}, "block_size"),
    ({"norm_placement": "post", "block": "parallel"}, "norm_placement"),
    ({"positional": "rotary", "nope_layers": (2,)}, "nope_layers must list layer indices below 2"),
    ({"positional": "rotary", "nope_layers": ("0",)}, "nope_layers must list layer indices"),
])
def test_bad_values_are_one_line_value_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**{**BASE, **changes})


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("T", [1, 9, QUERY_BLOCK + 40])
def test_a_block_computing_its_last_rows_alone_equals_the_whole_blocks_rows(name, T):
    from tests.helpers.tolerances import assert_float32_close, model_reduction

    model = switch_model(name)
    ids = torch.randint(0, 300, (2, T), generator=torch.Generator().manual_seed(T))
    with torch.inference_mode():
        x = model.embed(ids)
        for layer, block in enumerate(model.blocks):  # a sliding layer and a full one in window_softcap
            whole = block(x)  # (2, T, C)
            for first in {T - 1, T // 2}:
                rows = block(x, first)  # (2, T - first, C)
                assert rows.shape == (2, T - first, model.config.n_embd)
                assert_float32_close(rows, whole[:, first:], reduction=model_reduction(model.config),
                                     what=f"{name} layer {layer} rows {first}..")
            x = whole
        last = model.run_blocks(model.embed(ids), last_only=True)  # (2, 1, C)
        assert_float32_close(last, model.run_blocks(model.embed(ids))[:, -1:], reduction=model_reduction(model.config),
                             depth=model.config.n_layer, what=name)
