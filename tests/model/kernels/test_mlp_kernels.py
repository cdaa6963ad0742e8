"""The MLP's speed path (model/kernels/mlp_kernels.py, installed as `FusedMLP` and `FusedGatedMLP`
by model/kernels/inference.py): the activation, and a gated MLP's product with the gate,
computed inside oneDNN's products where nobody reads the pre-activations. It gives the decoder's
plain MLP's numbers within float32 rounding, steps aside for a hook on the pre-activations and
for training, and every inference path runs it alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import randomize_, tiny_loaded
from tests.helpers.tolerances import assert_float32_close
from transformer_viewer.model.capture.on_demand import mlp_activations
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT, MLP, GatedMLP
from transformer_viewer.model.decoder.hooks import hooks, reading
from transformer_viewer.model.kernels.inference import fuse_mlp, install_inference
from transformer_viewer.model.kernels.linear import EPILOGUES, fast_path_enabled, plain_kernels

pytestmark = pytest.mark.skipif(not fast_path_enabled(), reason="this torch build has no oneDNN path")

BASE = dict(n_layer=2, n_head=4, n_embd=32, block_size=64, vocab_size=50257)
GATED = dict(BASE, n_kv_head=2, positional="rotary", norm="rmsnorm", mlp="gated", bias=False)


def mlp_of(kind: str, activation: str, bias: bool, seed: int = 0):
    config = GPTConfig(**{**(GATED if kind == "gated" else BASE), "activation": activation, "n_mlp": 96, "bias": bias})
    torch.manual_seed(seed)
    mlp = (GatedMLP if kind == "gated" else MLP)(config)
    for p in mlp.parameters():
        torch.nn.init.normal_(p, 0.0, 0.3)
    return fuse_mlp(mlp.eval())


def step_by_step(mlp, x: torch.Tensor) -> torch.Tensor:
    """The MLP's output with a reader on its pre-activations, which sends it the plain way."""
    with reading(mlp, [("hook_pre", lambda _a: None)]):
        return mlp(x)


def fused_only(mlp, monkeypatch) -> None:
    """Make the step-by-step activation fail, so a test knows the speed path ran."""
    def refuse(_x):
        raise AssertionError("the step-by-step activation ran")
    monkeypatch.setattr(mlp, "act", refuse)


CASES = [("gated", "silu"), ("gated", "gelu_tanh"), ("plain", "gelu_tanh"), ("plain", "gelu"), ("plain", "relu"),
         ("plain", "silu")]


@pytest.mark.parametrize("kind,activation", CASES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 9, 32), (2, 40, 32), (32,)])
def test_the_fused_mlp_gives_the_step_by_step_numbers(kind, activation, bias, shape, monkeypatch):
    mlp = mlp_of(kind, activation, bias)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        plain = step_by_step(mlp, x)
        fused_only(mlp, monkeypatch)
        fast = mlp(x)
    assert fast.shape == plain.shape == shape
    # The two products sum over n_embd, then c_proj over n_mlp: the longest sum is n_mlp.
    assert_float32_close(fast, plain, reduction=96, depth=2, what=f"{kind} {activation} fused vs step by step")
    if activation == "relu":  # max(0, x) rounds nothing: the bits themselves
        assert torch.equal(fast, plain)


def test_a_hook_on_the_pre_activations_sees_them_and_gets_the_step_by_step_path():
    mlp = mlp_of("gated", "silu", False)
    x = torch.randn(1, 7, 32, generator=torch.Generator().manual_seed(2))
    seen = {}
    with torch.inference_mode(), reading(mlp, [("hook_pre", lambda a: seen.setdefault("gate", a.clone())),
                                               ("hook_pre_linear", lambda a: seen.setdefault("up", a.clone())),
                                               ("hook_post", lambda a: seen.setdefault("post", a.clone()))]):
        out = mlp(x)
        gate, up = torch.nn.functional.linear(x, mlp.c_fc.weight).split(96, dim=-1)
        projected = mlp.c_proj(seen["post"])
    assert_float32_close(seen["gate"], gate, reduction=32, what="gate read by hook_pre")
    assert_float32_close(seen["up"], up, reduction=32, what="up read by hook_pre_linear")
    assert torch.equal(seen["post"], torch.nn.functional.silu(seen["gate"]) * seen["up"])  # computed from what it saw
    assert torch.equal(out, projected)


def test_a_global_module_hook_sees_the_pre_activations_pass():
    mlp = mlp_of("gated", "silu", False)
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, _i, _o: seen.append(m))
    try:
        with torch.inference_mode():
            mlp(torch.randn(1, 3, 32))
    finally:
        handle.remove()
    assert mlp.hook_pre in seen and mlp.hook_pre_linear in seen


def test_a_hook_replacing_the_gate_changes_the_output():
    mlp = mlp_of("gated", "silu", False)
    x = torch.randn(1, 5, 32, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        plain = mlp(x)
        with hooks(mlp, [("hook_pre", lambda _m, _i, gate: torch.zeros_like(gate))]):
            zeroed = mlp(x)
        expected = mlp.c_proj(torch.zeros(1, 5, 96))  # silu(0) * up = 0
    assert torch.count_nonzero(plain) > 0
    assert torch.equal(zeroed, expected)


def test_training_takes_torchs_path_and_its_gradient(monkeypatch):
    mlp = mlp_of("gated", "silu", False).train()
    x = torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(4))
    out = mlp(x)  # grad enabled: the speed path must step aside
    gate, up = torch.nn.functional.linear(x, mlp.c_fc.weight).split(96, dim=-1)
    assert torch.equal(out, torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, mlp.c_proj.weight))
    out.square().sum().backward()
    assert mlp.c_fc.weight.grad is not None and torch.count_nonzero(mlp.c_fc.weight.grad) > 0


def test_plain_kernels_and_other_dtypes_take_the_step_by_step_path(monkeypatch):
    mlp = mlp_of("plain", "gelu_tanh", True)
    x = torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(5))
    calls = []
    real = mlp.act
    monkeypatch.setattr(mlp, "act", lambda t: calls.append(1) or real(t))
    with torch.inference_mode():
        with plain_kernels():
            mlp(x)
        assert len(calls) == 1
        mlp.double()(x.double())
        assert len(calls) == 2
        mlp.float()(x)
        assert len(calls) == 2  # back on the speed path


def test_every_activation_the_config_offers_has_an_epilogue():
    from transformer_viewer.model.decoder.gpt import _ACTIVATIONS
    assert set(_ACTIVATIONS) <= set(EPILOGUES)


def test_a_gated_layer_packs_by_its_halves_and_computes_from_them(monkeypatch):
    config = GPTConfig(**GATED, activation="silu", n_mlp=96)
    model = randomize_(GPT(config), seed=6).eval()
    ids = torch.randint(0, 50257, (1, 20), generator=torch.Generator().manual_seed(7))
    with torch.inference_mode():
        unpacked = model(ids)[0]
    if not install_inference(model).packed_bytes:
        pytest.skip("this torch build cannot pack weights for oneDNN")
    c_fc = model.blocks[0].mlp.c_fc
    assert sorted(c_fc._packed) == [(0, 96), (96, 192)]
    with torch.inference_mode():
        packed = model(ids)[0]
    assert_float32_close(packed, unpacked, reduction=96, depth=3, what="packed vs unpacked fused MLP")


def test_capture_prediction_and_on_demand_activations_agree_exactly():
    """The session mixes layers computed by capture and by prediction, and a view recomputes a
    layer's activations on demand: all run the MLP unread, the same path, the same bits."""
    loaded = tiny_loaded(GPTConfig(**GATED, activation="silu", n_mlp=96), seed=8)
    session = Session(loaded, keep_full=True, pattern_dtype=np.float32)
    session.set_prompt("The cat sat on the mat because the cat was tired")
    trace = session.run()
    for layer in range(2):
        np.testing.assert_array_equal(mlp_activations(session, trace, layer), trace.mlp_post[layer])
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 3] = True
    toggled = session.run(mask)  # resumes at layer 1 from layer 0 as the first run computed it
    fresh = Session(loaded, keep_full=True, pattern_dtype=np.float32)
    fresh.set_prompt("The cat sat on the mat because the cat was tired")
    full = fresh.run(mask)
    np.testing.assert_array_equal(toggled.mlp_post, full.mlp_post)
    np.testing.assert_array_equal(toggled.token_logprobs, full.token_logprobs)


def test_a_torch_build_that_refuses_epilogues_gets_the_step_by_step_mlp(monkeypatch):
    """A kernel that refuses an activation or a product with the gate turns the epilogues off
    for good; the MLP computes its output step by step, and plain products still run on oneDNN."""
    import transformer_viewer.model.kernels.linear as linear_module

    real = torch.ops.mkldnn._linear_pointwise

    class Refusing:
        def __call__(self, x, w, b, attr, scalars, algorithm):
            if attr != "none":
                raise RuntimeError("unsupported post-op")
            return real(x, w, b, attr, scalars, algorithm)

        def binary(self, *args):
            raise RuntimeError("unsupported post-op")

    monkeypatch.setattr(linear_module, "_epilogues_ok", True)
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", Refusing())
    mlp = mlp_of("gated", "silu", False)
    x = torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(9))
    with torch.inference_mode():
        out = mlp(x)
        assert linear_module._epilogues_ok is False and linear_module.fast_path_enabled()
        expected = step_by_step(mlp, x)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("kind,activation", [("gated", "silu"), ("plain", "gelu")])
def test_the_fused_mlp_against_the_decoders_plain_mlp(kind, activation):
    """The installed module against the decoder's own MLP on the same weights: torch's GEMM and
    torch's activation there, oneDNN's product with its epilogue here."""
    fused = mlp_of(kind, activation, True)
    config = GPTConfig(**{**(GATED if kind == "gated" else BASE), "activation": activation, "n_mlp": 96, "bias": True})
    plain = (GatedMLP if kind == "gated" else MLP)(config).eval()
    plain.load_state_dict(fused.state_dict())  # the same parameter names, installed or not
    x = torch.randn(2, 17, 32, generator=torch.Generator().manual_seed(11))
    with torch.inference_mode():
        fast, reference = fused(x), plain(x)
    assert type(fused) is not type(plain)
    assert_float32_close(fast, reference, reduction=96, depth=2, what=f"{kind} {activation} fused vs the decoder's")
