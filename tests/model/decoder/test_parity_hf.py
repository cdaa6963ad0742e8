"""Parity with Hugging Face's GPT2LMHeadModel, the reference implementation: random weights saved
with save_pretrained and read back through our loader give the same logits, attention
patterns, residual stream and head-ablation effects."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from tests.helpers.models import hf_config, hf_model
from tests.helpers.tolerances import assert_float32_close, float32_atol, model_reduction
from transformer_viewer.model.capture.interventions import head_mask_hooks
from transformer_viewer.model.capture.on_demand import head_pattern
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.kernels.linear import fast_path_enabled, plain_kernels

PROMPT = "When Mary and John went to the store, John gave a drink to"


def _pair(tmp_path_factory, config, seed, randomize=True, attn_scale=1.0):
    hf = hf_model(config, seed=seed, randomize=randomize)
    if attn_scale != 1.0:
        with torch.no_grad():
            for block in hf.transformer.h:
                block.attn.c_attn.weight.mul_(attn_scale)
    folder = tmp_path_factory.mktemp("hf")
    hf.save_pretrained(folder)
    return hf, load_checkpoint(str(folder))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _pair(tmp_path_factory, hf_config(n_layer=3, n_head=4, n_embd=32, n_positions=64), seed=21)


def _session(loaded) -> Session:
    s = Session(loaded, pattern_dtype=np.float32)
    s.set_prompt(PROMPT)
    return s


def _hf_forward(hf, ids, **kw):
    with torch.no_grad():
        return hf(ids, output_attentions=True, output_hidden_states=True, **kw)


def check_parity(hf, loaded):
    """Logits, every layer's patterns, the residual stream and token log-probabilities agree
    with Hugging Face's within float32's rounding for this model's sums (tests/helpers/tolerances.py):
    the kernels of another CPU, oneDNN or another thread count reorder the sums, nothing more."""
    s = _session(loaded)
    ids = torch.from_numpy(np.asarray(s.tokens.ids))[None]  # (1, T)
    out = _hf_forward(hf, ids)
    with torch.no_grad():
        ours = loaded.model(ids)[0]
    L, K = loaded.config.n_layer, model_reduction(loaded.config)
    assert_float32_close(ours, out.logits, reduction=K, depth=L + 1, what="logits")
    trace = s.run()
    assert len(out.attentions) == L
    patterns = []
    for layer in range(L):
        hf_pattern = out.attentions[layer][0].numpy()  # (nh, T, T)
        # Recomputed on demand from the session's cache, as the views get them.
        ours_pattern = np.stack([head_pattern(s, trace, layer, h) for h in range(loaded.config.n_head)])
        assert_float32_close(ours_pattern, hf_pattern, reduction=K, depth=layer + 1, scale=1.0,
                             what=f"layer {layer} attention")
        assert_float32_close(trace.overview_max[layer], hf_pattern, reduction=K, depth=layer + 1, scale=1.0,
                             what=f"layer {layer} overview (one token per cell here)")
        patterns.append(ours_pattern)
    # Rows with 9+ keys would have maxima <= 1/9 if uniform: peaked ones make the comparison mean something.
    assert np.stack(patterns)[:, :, 8:].max(-1).mean() > 0.3
    resid = s.residuals()
    for layer in range(L):  # HF's hidden_states[L] is after ln_f; ours are the blocks' inputs
        assert_float32_close(resid[layer][0], out.hidden_states[layer][0], reduction=K, depth=layer + 1,
                             what=f"layer {layer} residual stream")
    hf_logprobs = torch.log_softmax(out.logits[0], dim=-1)
    T = ids.shape[1]
    # A log-probability moves by at most twice its logits' largest error (logit minus logsumexp).
    logit_scale = float(out.logits.abs().max())
    assert_float32_close(trace.token_logprobs[1:], hf_logprobs[torch.arange(T - 1), ids[0, 1:]],
                         reduction=K, depth=L + 1, scale=2 * logit_scale, what="token log-probabilities")


def test_tiny_parity(tiny):
    hf, loaded = tiny
    assert loaded.format == "huggingface" and loaded.config.activation == "gelu_tanh"
    check_parity(hf, loaded)


def _zero_head_pre_hook(layer_heads: list[int], hs: int):
    """HF: zero heads' slices of c_proj's input (the concatenated per-head outputs)."""
    def pre_hook(_module, args):
        x = args[0].clone()  # (B, T, C)
        for h in layer_heads:
            x[..., h * hs:(h + 1) * hs] = 0.0
        return (x,)
    return pre_hook


@pytest.mark.parametrize("heads", [[(0, 1)], [(2, 3)], [(1, 0), (1, 2), (2, 1)]])
def test_zero_ablation_parity(tiny, heads):
    hf, loaded = tiny
    c = loaded.config
    mask = np.zeros((c.n_layer, c.n_head), dtype=bool)
    for layer, h in heads:
        mask[layer, h] = True
    s = _session(loaded)
    ids = torch.from_numpy(np.asarray(s.tokens.ids))[None]
    handles = [hf.transformer.h[layer].attn.c_proj.register_forward_pre_hook(
        _zero_head_pre_hook([h for lay, h in heads if lay == layer], c.head_size)) for layer in {lay for lay, _ in heads}]
    try:
        with torch.no_grad():
            hf_logits = hf(ids).logits[0]  # (T, V)
    finally:
        for handle in handles:
            handle.remove()
    with hooks(loaded.model, head_mask_hooks(mask, "zero")), torch.no_grad():
        ours = loaded.model(ids)[0][0]
    K = model_reduction(c)
    assert_float32_close(ours, hf_logits, reduction=K, depth=c.n_layer + 1, what="ablated logits")
    with torch.no_grad():
        clean = hf(ids).logits[0]
    # The ablation did something, far beyond rounding.
    assert (clean - hf_logits).abs().max().item() > 100 * float32_atol(K, c.n_layer + 1)
    # The session's incremental path gives the same distribution.
    s.run()
    nxt = s.run(mask).next
    assert_float32_close(nxt.probs, torch.softmax(hf_logits[-1], -1), reduction=K, depth=c.n_layer + 1,
                         scale=1.0, what="ablated next-token probabilities")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    # GPT-2 small's shapes (124M parameters) with Hugging Face's own random init, Q/K/V scaled
    # up so the patterns are peaked rather than near-uniform.
    config = hf_config(n_layer=12, n_head=12, n_embd=768, n_positions=1024)
    return _pair(tmp_path_factory, config, seed=22, randomize=False, attn_scale=4.0)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["plain", "onednn"])
def test_gpt2_small_sized_parity(small, kernel):
    """torch's default GEMM (MKL: AVX2 or AVX-512 by CPU) and the app's inference GEMM (oneDNN,
    model/kernels/linear.py) sum in other orders than Hugging Face's run: both are held to the same
    float32 bound for 3072-term sums (tests/helpers/tolerances.py), which at layer 11 is still
    finer than the float16 the app stores patterns in (3e-5 apart near 0.03)."""
    hf, loaded = small
    assert loaded.n_params == sum(p.numel() for p in hf.parameters())
    if kernel == "plain":
        with plain_kernels():
            check_parity(hf, loaded)
    else:
        if not fast_path_enabled():
            pytest.skip("oneDNN's linear kernel is not in this torch build")
        check_parity(hf, loaded)


@contextlib.contextmanager
def _exact_gelu(loaded):
    """GPT-2 uses the tanh GELU; swap in the exact erf GELU, the classic porting mistake."""
    mlps = [block.mlp for block in loaded.model.blocks]
    before = [mlp.act for mlp in mlps]
    for mlp in mlps:
        mlp.act = torch.nn.functional.gelu
    try:
        yield
    finally:
        for mlp, act in zip(mlps, before, strict=True):
            mlp.act = act


@pytest.mark.parametrize("size", ["tiny", pytest.param("small", marks=pytest.mark.slow)])
def test_parity_catches_wrong_gelu(request, size):
    """The float32 bound is loose enough for any CPU's kernels yet a real arithmetic error (the
    exact GELU for the tanh one moves patterns by 2e-4 to 1e-3) fails it."""
    hf, loaded = request.getfixturevalue(size)
    with plain_kernels(), _exact_gelu(loaded), pytest.raises(AssertionError, match="over the float32 bound"):
        check_parity(hf, loaded)
