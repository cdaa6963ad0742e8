"""Installing the inference kernels (model/kernels/inference.py): the decoder runs its plain path
until a strategy is installed explicitly; installing swaps module classes and nothing a
checkpoint or a hook names; the installed model computes the plain path's numbers (the same
bits where the same GEMM runs and nothing is blocked, else within the float32 rule); a hook
costs what the docstring says; the strategy follows the CPU's features and the environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from tests.helpers.models import tiny_gpt, tiny_loaded
from tests.helpers.tolerances import assert_float32_close, model_reduction
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import CausalSelfAttention, GatedMLP
from transformer_viewer.model.decoder.hooks import hooks, reading
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels.inference import (
    BlockedAttention,
    FusedGatedMLP,
    InferenceStrategy,
    choose_strategy,
    install_inference,
    installed_inference,
)
from transformer_viewer.model.kernels.linear import Linear, fast_path_enabled

LLAMA = GPTConfig(n_layer=2, n_head=4, n_kv_head=2, n_embd=32, block_size=300, vocab_size=500, positional="rotary",
                  norm="rmsnorm", mlp="gated", activation="silu", bias=False)
needs_onednn = pytest.mark.skipif(not fast_path_enabled(), reason="oneDNN's linear kernel is not in this torch build")


def _ids(T: int = 150, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, LLAMA.vocab_size, (1, T), generator=torch.Generator().manual_seed(seed))


def _logits(model, ids, named=()) -> torch.Tensor:
    with torch.inference_mode(), hooks(model, list(named)):
        return model(ids)[0]


def test_the_decoder_runs_its_plain_modules_until_a_strategy_is_installed():
    model = tiny_gpt(LLAMA)
    assert installed_inference(model) is None
    assert {type(b.attn) for b in model.blocks} == {CausalSelfAttention}
    assert {type(m) for m in model.modules() if isinstance(m, nn.Linear)} == {nn.Linear}


@needs_onednn
def test_install_swaps_classes_only_and_uninstall_restores_the_plain_path():
    model = tiny_gpt(LLAMA, seed=1)
    ids = _ids()
    names = [n for n, _ in model.named_modules()]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    plain = _logits(model, ids)
    installed = install_inference(model)
    assert installed.strategy.gemm == "onednn" and installed_inference(model) is installed
    assert all(type(b.attn) is BlockedAttention and type(b.mlp) is FusedGatedMLP for b in model.blocks)
    assert type(model.lm_head) is Linear and model.lm_head.weight is model.wte.weight  # still tied
    assert [n for n, _ in model.named_modules()] == names  # hook points and checkpoints see the same names
    assert model.state_dict().keys() == state.keys()
    assert install_inference(model) is installed  # once: the same strategy again changes nothing
    installed.uninstall()
    assert installed_inference(model) is None
    assert {type(b.attn) for b in model.blocks} == {CausalSelfAttention}
    assert {type(b.mlp) for b in model.blocks} == {GatedMLP}
    assert {type(m) for m in model.modules() if isinstance(m, nn.Linear)} == {nn.Linear}
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert torch.equal(_logits(model, ids), plain)  # the plain path again, bit for bit


@pytest.mark.parametrize("gemm", ["torch", pytest.param("onednn", marks=needs_onednn)])
def test_the_installed_model_computes_the_plain_paths_numbers(gemm):
    model = tiny_gpt(LLAMA, seed=2)
    ids = _ids(2 * 128 + 40)  # three blocks of query rows
    plain = _logits(model, ids)
    install_inference(model, choose_strategy(model, {"TV_GEMM": gemm}))
    fast = _logits(model, ids)
    # Blocks of query rows sum as the whole product on most CPUs; oneDNN's GEMM and the fused
    # SiLU round their own way: the float32 rule either way.
    assert_float32_close(fast, plain, reduction=model_reduction(LLAMA), depth=LLAMA.n_layer + 1,
                         what=f"installed ({gemm}) vs the decoder's plain logits")


@pytest.mark.parametrize("gemm", ["torch", pytest.param("onednn", marks=needs_onednn)])
def test_a_pattern_hook_costs_memory_and_gets_the_unhooked_bits(gemm):
    model = tiny_gpt(LLAMA, seed=3)
    ids = _ids(200)
    install_inference(model, choose_strategy(model, {"TV_GEMM": gemm}))
    seen = []
    unhooked = _logits(model, ids)
    hooked = _logits(model, ids, [("blocks.1.attn.hook_pattern", lambda _m, _i, p: seen.append(p.shape))])
    assert seen == [(1, LLAMA.n_head, 200, 200)]  # the whole pattern, made for its hook
    assert torch.equal(hooked, unhooked)


@needs_onednn
def test_a_hook_on_the_pre_activations_gets_that_layers_plain_mlp():
    model = tiny_gpt(LLAMA, seed=4)
    ids = _ids(40)
    install_inference(model)
    gates = []
    calls = []
    act = model.blocks[0].mlp.act
    model.blocks[0].mlp.act = lambda t: calls.append(1) or act(t)
    model.blocks[1].mlp.act = lambda t: pytest.fail("layer 1's MLP stepped aside from the fused path")
    fused = _logits(model, ids)
    assert not calls  # nobody reads layer 0's pre-activations: fused
    with torch.inference_mode(), reading(model, [("blocks.0.mlp.hook_pre", gates.append)]):
        stepped = model(ids)[0]
    assert len(calls) == 1 and gates[0].shape == (1, 40, LLAMA.n_mlp)  # layer 0 alone went step by step
    assert_float32_close(stepped, fused, reduction=model_reduction(LLAMA), depth=LLAMA.n_layer + 1,
                         what="a layer's plain MLP vs its fused one")


def test_autograd_takes_the_decoders_plain_path_and_its_gradient():
    plain, installed = tiny_gpt(LLAMA, seed=5).train(), tiny_gpt(LLAMA, seed=5).train()
    install_inference(installed)
    ids = _ids(33)
    losses = []
    for model in (plain, installed):
        _, loss = model(ids, ids)
        loss.backward()
        losses.append(loss.detach())
    assert torch.equal(losses[0], losses[1])
    assert torch.equal(plain.blocks[0].attn.c_attn.weight.grad, installed.blocks[0].attn.c_attn.weight.grad)


def test_the_strategy_follows_the_environment():
    model = tiny_gpt(LLAMA)
    isa = torch.backends.cpu.get_cpu_capability()
    assert choose_strategy(model, {"TV_GEMM": "torch"}) == InferenceStrategy("torch", isa, "TV_GEMM")
    assert choose_strategy(model, {"TV_ONEDNN": "0"}) == InferenceStrategy("torch", isa, "TV_ONEDNN")
    assert choose_strategy(model, {"TV_ONEDNN": "0", "TV_GEMM": "onednn"}).gemm == "torch"  # the older switch holds
    assert choose_strategy(model, {}).gemm == ("onednn" if fast_path_enabled() else "torch")
    with pytest.raises(ModelError, match="TV_GEMM='mkl' is not a GEMM path; use one of onednn, torch"):
        choose_strategy(model, {"TV_GEMM": "mkl"})
    model.double()
    assert choose_strategy(model, {"TV_GEMM": "onednn"}).gemm == "torch"  # oneDNN's path is float32's


def test_the_session_installs_once_and_names_its_kernels():
    loaded = tiny_loaded(LLAMA)
    session = Session(loaded)
    strategy = session.inference.strategy
    assert session.kernel_path == strategy.kernel_path
    assert session.kernel_path.startswith(f"gemm={strategy.gemm} isa={strategy.isa} packed={strategy.packed} ")
    assert "attention=blocks:128 vocab=blocks:2048" in session.kernel_path
    if strategy.gemm == "onednn":  # a tiny model's copies fit any machine's bound
        assert strategy.packed == "blocks+head" and session.inference.packed_bytes > 0
    assert Session(loaded).inference is session.inference  # a second session on the model keeps its kernels


def test_an_avx2_only_cpu_gets_its_own_strategy():
    """The emulated AVX2-only CPU (as BENCHMARKS.md runs it): the choice follows the capability
    torch reports, and is recorded in the kernel path."""
    code = ("from tests.helpers.models import tiny_gpt, TINY; "
            "from transformer_viewer.model.kernels.inference import choose_strategy; "
            "print(choose_strategy(tiny_gpt(TINY)).kernel_path)")
    env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2",
               OMP_NUM_THREADS="1")
    env.pop("TV_GEMM", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert out.returncode == 0, out.stderr
    path = out.stdout.strip()
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):  # a CPU that can run AVX2 at all
        assert " isa=AVX2 " in path
    gemm = "onednn" if fast_path_enabled() and os.environ.get("TV_ONEDNN", "1") != "0" else "torch"
    assert path.startswith(f"gemm={gemm} ")


def test_a_pattern_hook_edits_a_predictions_last_row_as_on_the_plain_path():
    """The last layer of a prediction computes its last row alone; a hook that edits the pattern
    there still gets the whole pattern and its edit reaches the output, as on the plain model."""
    plain, installed = tiny_gpt(LLAMA, seed=6), tiny_gpt(LLAMA, seed=6)
    install_inference(installed)
    ids = _ids(20)
    uniform = ("blocks.1.attn.hook_pattern", lambda _m, _i, p: torch.tril(torch.ones_like(p)) / torch.arange(
        1, p.shape[-1] + 1, dtype=p.dtype)[:, None])  # every query attends evenly to its past
    out = {}
    for name, model in (("plain", plain), ("installed", installed)):
        with torch.inference_mode(), hooks(model, [uniform]):
            out[name] = model.run_blocks(model.embed(ids), last_only=True)  # (1, 1, C)
        with torch.inference_mode():
            out[name + " unhooked"] = model.run_blocks(model.embed(ids), last_only=True)
    assert not torch.allclose(out["installed"], out["installed unhooked"])  # the edit reached the output
    for which in ("", " unhooked"):
        assert_float32_close(out["installed" + which], out["plain" + which], reduction=model_reduction(LLAMA),
                             depth=LLAMA.n_layer + 1, what=f"last row{which}, installed vs plain")
