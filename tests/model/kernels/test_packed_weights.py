"""Packed weights (model/kernels/linear.py): a layer computing from its weight packed once in oneDNN's
layout gives what it gives from the weight itself, never from a copy that is out of date, and
`pack_for_inference` packs the decoder blocks' layers, then the head by blocks of the
vocabulary, as far as they fit its memory bound."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from tests.helpers.models import TINY, tiny_gpt, tiny_loaded
from tests.helpers.tolerances import assert_float32_close
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.capture.unembedding import VOCAB_BLOCK
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.kernels.inference import install_inference
from transformer_viewer.model.kernels.linear import Linear, fast_path_enabled, plain_kernels
from transformer_viewer.model.kernels.packing import pack_for_inference, packing_plan, unpack_all

pytestmark = pytest.mark.skipif(not (fast_path_enabled() and Linear(2, 2).can_pack()),
                                reason="this torch build cannot pack weights for oneDNN")

PROMPT = "The cat sat on the mat because the cat was tired, and then the dog"
LLAMA = GPTConfig(n_layer=3, n_head=4, n_kv_head=2, n_embd=32, block_size=64, vocab_size=50257, positional="rotary",
                  norm="rmsnorm", mlp="gated", activation="silu", bias=False)


def layer(n_in: int = 48, n_out: int = 40, bias: bool = True, seed: int = 0) -> Linear:
    torch.manual_seed(seed)
    m = Linear(n_in, n_out, bias=bias)
    with torch.no_grad():
        m.weight.normal_(0, n_in ** -0.5)
    return m


def unpacked(m: Linear, x: torch.Tensor) -> torch.Tensor:
    """The same layer's output from its weight as torch stores it."""
    packed, m._packed = m._packed, None
    try:
        return m(x)
    finally:
        m._packed = packed


@pytest.mark.parametrize("rows", [(48,), (1, 48), (7, 48), (64, 48), (2, 300, 48)])
@pytest.mark.parametrize("bias", [True, False])
def test_a_packed_layer_gives_the_layers_result(rows, bias):
    m = layer(bias=bias)
    assert m.pack()
    assert m._copy(0, 40).layout == torch._mkldnn  # the copy in oneDNN's layout is what runs
    x = torch.randn(*rows)
    with torch.inference_mode():
        packed, plain = m(x), unpacked(m, x)
        with plain_kernels():
            torch_own = m(x)
    assert packed.shape == plain.shape == (*rows[:-1], 40)
    # Same kernel, same numbers: equal to float32 rounding wherever measured, bit for bit on
    # the CPUs this project runs on (the bound keeps another CPU's blocking from failing it).
    assert_float32_close(packed, plain, reduction=48, what="packed vs unpacked oneDNN")
    assert_float32_close(packed, torch_own, reduction=48, what="packed oneDNN vs torch's linear")


def test_a_weight_changed_moved_or_replaced_is_never_read_from_an_old_copy():
    m = layer()
    x = torch.randn(5, 48)
    assert m.pack()
    with torch.no_grad():
        m.weight.mul_(-2.0)  # in place: the version counter moves
        assert_float32_close(m(x), torch.nn.functional.linear(x, m.weight, m.bias), reduction=48, what="after mul_")
        m.load_state_dict({"weight": torch.randn(40, 48), "bias": torch.zeros(40)})
        assert_float32_close(m(x), torch.nn.functional.linear(x, m.weight, m.bias), reduction=48, what="reloaded")
    m.weight = torch.nn.Parameter(torch.randn(40, 48))  # another tensor altogether
    with torch.no_grad():
        assert_float32_close(m(x), torch.nn.functional.linear(x, m.weight, m.bias), reduction=48, what="replaced")
    assert m._packed is not None  # packed again for the weight as it is now, not dropped
    m.double()  # a dtype oneDNN's float32 path does not take: the copy goes, torch computes
    with torch.no_grad():
        assert torch.equal(m(x.double()), torch.nn.functional.linear(x.double(), m.weight, m.bias))
    assert m._packed is None


def test_a_packed_model_can_be_copied_and_pickled_and_the_copy_starts_unpacked():
    model = tiny_gpt(LLAMA, seed=4)
    install_inference(model)
    twin = copy.deepcopy(model)
    again = pickle.loads(pickle.dumps(model))  # bytes made here, in memory
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.no_grad():
        expected = model(ids)[0]
        for other in (twin, again):
            assert other.blocks[0].mlp.c_fc._packed is None
            assert_float32_close(other(ids)[0], expected, reduction=128, depth=LLAMA.n_layer + 1, what="copy")
    assert model.blocks[0].mlp.c_fc._packed is not None  # the original keeps its copies


def test_training_a_packed_layer_takes_torchs_kernel_and_its_gradient():
    m = layer()
    m.pack()
    x = torch.randn(4, 48, requires_grad=True)
    y = m(x)
    assert "Addmm" in type(y.grad_fn).__name__
    y.sum().backward()
    torch.testing.assert_close(x.grad, m.weight.sum(0).expand(4, 48))


def test_inference_tensors_are_left_unpacked():
    with torch.inference_mode():
        m = layer()  # weights made in inference mode keep no version counter to check a copy by
    assert not m.can_pack() and not m.pack()
    with torch.inference_mode():
        x = torch.randn(3, 48)
        assert torch.equal(m(x), m(x))


def test_a_layer_packed_by_blocks_of_rows_gives_each_block_from_its_copy():
    m = layer(48, 100)
    assert m.pack(block_rows=32)
    assert sorted(m._packed) == [(0, 32), (32, 64), (64, 96), (96, 100)]
    x = torch.randn(9, 48)
    with torch.inference_mode():
        whole = unpacked(m, x)
        for r0, r1 in sorted(m._packed):
            assert m._copy(r0, r1) is m._packed[(r0, r1)]
            assert_float32_close(m.rows(x, r0, r1), whole[:, r0:r1], reduction=48, what=f"rows {r0}:{r1}")
        assert m._copy(0, 100) is None and m._copy(5, 37) is None  # no copy of those: the weight itself
        assert torch.equal(m(x), whole)


def test_pack_for_inference_packs_the_blocks_then_the_head_as_far_as_they_fit():
    model = tiny_gpt(LLAMA, seed=3)
    assert pack_for_inference(model) == 0  # the decoder's own nn.Linear layers: nothing to pack
    install_inference(model)  # oneDNN's Linear in their place, packed
    layers = [m for m in model.blocks.modules() if isinstance(m, Linear)]
    blocks = sum(m.weight.numel() * 4 for m in layers)
    head = model.lm_head.weight.numel() * 4
    assert len(layers) == 4 * LLAMA.n_layer  # q/k/v, output, gate+up, down
    assert packing_plan(model, max_bytes=blocks + head) == "blocks+head"  # known from the shapes alone
    assert pack_for_inference(model, max_bytes=blocks + head) == blocks + head
    assert all(m._packed is not None for m in (*layers, model.lm_head))
    assert len(model.lm_head._packed) == -(-LLAMA.vocab_size // VOCAB_BLOCK)  # by the unembedding's blocks
    assert packing_plan(model, max_bytes=blocks + head - 1) == "blocks"
    assert pack_for_inference(model, max_bytes=blocks + head - 1) == blocks  # the blocks alone fit
    assert model.lm_head._packed is None and all(m._packed is not None for m in layers)
    assert packing_plan(model, max_bytes=blocks - 1) == "none"
    assert pack_for_inference(model, max_bytes=blocks - 1) == 0  # not even those: nothing, and nothing kept
    assert all(m._packed is None for m in (*layers, model.lm_head))
    assert pack_for_inference(model) == blocks + head  # the default bound: far above this model


@pytest.mark.parametrize("config", [None, LLAMA], ids=["gpt2", "llama"])
def test_a_packed_models_capture_predictions_and_recompute_agree(config):
    config = config or TINY
    plain = Session(tiny_loaded(config, seed=5), pattern_dtype=np.float32)
    unpack_all(plain.model)  # oneDNN's kernel from the weights as torch stores them
    packed = Session(tiny_loaded(config, seed=5), pattern_dtype=np.float32)
    assert packed.inference.packed_bytes > 0
    mask = np.zeros((plain.config.n_layer, plain.config.n_head), dtype=bool)
    mask[1, 2] = True
    for s in (plain, packed):
        s.set_prompt(PROMPT)
    a, b = plain.run(), packed.run()
    depth = plain.config.n_layer + 1
    assert_float32_close(b.resid_norms, a.resid_norms, reduction=128, depth=depth, what="residual norms")
    assert_float32_close(b.token_logprobs[1:], a.token_logprobs[1:], reduction=128, depth=depth, what="log-probs")
    # Within the packed model every path uses the same copies: a prediction, a masked run
    # recomputed from the cache and a fresh masked capture agree as they do unpacked.
    predicted = packed.predict(mask)
    recomputed = packed.run(mask)
    fresh = Session(packed.loaded, pattern_dtype=np.float32)
    fresh.set_prompt(PROMPT)
    np.testing.assert_allclose(predicted.probs, recomputed.next.probs, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(recomputed.resid_norms, fresh.run(mask).resid_norms, rtol=1e-5, atol=1e-6)
