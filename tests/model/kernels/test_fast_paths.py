"""The speed paths of capture (bench/) compute exactly what the plain paths compute.

No-grad attention works by query blocks in a reusable workspace (installed on a model by
model/kernels/inference.py), the unembedding by vocabulary blocks, head norms through per-head
factors of c_proj: each is checked against the straightforward version, the decoder's own.
"""

import numpy as np
import pytest
import torch

import transformer_viewer.model.kernels.linear as linear_module
from tests.helpers.tolerances import assert_float32_close, model_reduction
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import LoadedModel
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT, attention_pattern
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.kernels.attention_kernels import QUERY_BLOCK
from transformer_viewer.model.kernels.inference import choose_strategy, install_inference
from transformer_viewer.model.kernels.linear import Linear, fast_path_enabled, linear, plain_kernels

CFG = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=3 * QUERY_BLOCK + 16, vocab_size=50257)


def _model(seed=0):
    torch.manual_seed(seed)
    return GPT(CFG).eval()


def _blocked(model):
    """The blocked attention installed, on torch's GEMM as the plain decoder, so only the
    attention paths differ (model/kernels/linear.py's inference GEMM has its own tests below)."""
    return install_inference(model, choose_strategy(model, {"TV_GEMM": "torch"}))


def _patterns(model, ids):
    """Each layer's pattern, read by a hook, and the logits, without autograd."""
    kept = {}

    def keep(layer):
        def hook(_m, _i, out):
            kept[layer] = out.detach().clone()
        return hook

    named = [(f"blocks.{i}.attn.hook_pattern", keep(i)) for i in range(CFG.n_layer)]
    with torch.no_grad(), hooks(model, named):
        logits = model(ids)[0]
    return kept, logits.detach()


@pytest.mark.parametrize("T", [1, 7, QUERY_BLOCK, QUERY_BLOCK + 1, 3 * QUERY_BLOCK + 16])
def test_no_grad_blocked_attention_equals_the_full_product(T):
    model = _model()
    ids = torch.randint(0, CFG.vocab_size, (2, T))
    full, logits_full = _patterns(model, ids)  # the decoder's plain attention
    _blocked(model)
    blocked, logits_blocked = _patterns(model, ids)
    for layer in full:
        # Bit for bit where the GEMM sums a block of rows as it sums the whole matrix (every CPU
        # seen at this width); a few float32 ulps where it does not. A wrong mask moves far more.
        torch.testing.assert_close(blocked[layer], full[layer], rtol=1e-5, atol=1e-6)
        assert torch.equal(torch.triu(blocked[layer], 1), torch.zeros_like(blocked[layer]))
    torch.testing.assert_close(logits_blocked, logits_full, rtol=1e-5, atol=1e-5)


def test_workspace_reuse_across_shapes_keeps_the_future_at_zero():
    model = _model()
    installed = _blocked(model)
    for T in (3 * QUERY_BLOCK, 5, 3 * QUERY_BLOCK, QUERY_BLOCK + 3, 3 * QUERY_BLOCK):
        ids = torch.randint(0, CFG.vocab_size, (1, T))
        ref, ref_logits = _patterns(model, ids)  # the blocks without a workspace
        with installed.scratch_patterns():
            patterns, logits = _patterns(model, ids)
        assert torch.equal(logits, ref_logits)
        assert all(torch.equal(patterns[layer], ref[layer]) for layer in ref)
    assert installed.workspace_now() is None  # lent for the block only


def test_a_hook_that_keeps_patterns_gets_its_own_tensor_per_layer():
    loaded = LoadedModel(model=_model(), config=CFG, format="native", source="<t>", name="t")
    s = Session(loaded, keep_full=True)
    s.set_prompt("one two three four five six seven eight nine ten " * 4)
    kept = []
    named = [(f"blocks.{i}.attn.hook_pattern", lambda _m, _i, out: kept.append(out)) for i in range(CFG.n_layer)]
    with hooks(s.model, named):
        trace = s.run()
    assert kept[0].data_ptr() != kept[1].data_ptr()  # no shared workspace under a foreign hook
    for layer in range(CFG.n_layer):
        np.testing.assert_array_equal(trace.attention[layer], kept[layer][0].numpy().astype(np.float16))


def test_capture_arrays_match_a_direct_computation():
    loaded = LoadedModel(model=_model(1), config=CFG, format="native", source="<t>", name="t")
    s = Session(loaded)
    s.set_prompt("the cat sat on the mat and the dog sat on the log " * 5)
    trace = s.run()
    ids = torch.tensor([s.tokens.ids])
    m = s.model
    with torch.no_grad():
        z = {}
        named = [(f"blocks.{i}.attn.hook_z", lambda _m, _i, out, i=i: z.__setitem__(i, out[0].clone()))
                 for i in range(CFG.n_layer)]
        with hooks(m, named):
            logits = m(ids)[0][0]
        logprobs = torch.log_softmax(logits, -1)
    T = ids.shape[1]
    np.testing.assert_allclose(trace.token_logprobs[1:], logprobs[torch.arange(T - 1), ids[0, 1:]].numpy(),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(trace.next.probs, logprobs[-1].exp().numpy(), rtol=1e-5, atol=1e-7)
    for layer in range(CFG.n_layer):
        w = m.blocks[layer].attn.c_proj.weight  # (C, C)
        w_heads = w.T.reshape(CFG.n_head, CFG.head_size, CFG.n_embd)  # (nh, hs, C)
        with torch.no_grad():
            direct = torch.einsum("tnh,nhc->ntc", z[layer], w_heads).norm(dim=-1)  # (nh, T)
        np.testing.assert_allclose(trace.head_norms[layer], direct.numpy(), rtol=1e-4, atol=1e-6)


def test_head_factors_reproduce_each_heads_gram_and_follow_the_weight():
    """F_h F_h^T = W_h W_h^T for every head, a head whose slice has rank below its size
    included, and a weight changed in place gets new factors."""
    from transformer_viewer.model.capture.capture_readers import HeadFactors
    m = GPT(CFG).eval()
    w = m.blocks[0].attn.c_proj.weight
    with torch.no_grad():
        w[:, CFG.head_size:CFG.head_size + 3] = 0.0  # head 1: three of its dimensions write nothing
    factors = HeadFactors()
    f = factors.get(m, 0)
    assert f.shape == (CFG.n_head, CFG.head_size, CFG.head_size) and f.dtype == torch.float32
    w_heads = w.detach().T.reshape(CFG.n_head, CFG.head_size, CFG.n_embd).double()  # (nh, hs, C)
    gram = w_heads @ w_heads.transpose(1, 2)
    np.testing.assert_allclose((f.double() @ f.double().transpose(1, 2)).numpy(), gram.numpy(), rtol=0, atol=1e-6)
    assert factors.get(m, 0) is f  # cached while the weight is unchanged
    with torch.no_grad():
        w.mul_(2.0)
    again = factors.get(m, 0)
    assert again is not f
    torch.testing.assert_close(again, 2.0 * f, rtol=1e-6, atol=1e-7)


# -- the inference GEMM (model/kernels/linear.py) ---------------------------------------------------------
needs_onednn = pytest.mark.skipif(not fast_path_enabled(), reason="oneDNN's linear kernel is not in this torch build")


@needs_onednn
@pytest.mark.parametrize("shape", [(32,), (768,), (1, 32), (7, 32), (2, 5, 32), (64, 768)])
@pytest.mark.parametrize("bias", [True, False])
def test_inference_linear_matches_f_linear(shape, bias):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    w = torch.randn(48, shape[-1]) * 0.05
    b = torch.randn(48) if bias else None
    with torch.inference_mode():
        fast = linear(x, w, b)
        with plain_kernels():
            plain = linear(x, w, b)
    assert fast.shape == plain.shape == (*shape[:-1], 48)
    assert_float32_close(fast, plain, reduction=shape[-1], what="oneDNN vs torch linear")
    if x.dim() == 1:  # a vector goes through as a one-row matrix, on the fast kernel
        assert linear_module._use_onednn(x, w)
        assert torch.equal(fast, linear(x[None], w, b)[0])
    assert torch.equal(plain, torch.nn.functional.linear(x, w, b))


def test_training_takes_torchs_kernel_and_gets_its_gradient():
    torch.manual_seed(0)
    layer = Linear(16, 8)
    x = torch.randn(4, 16, requires_grad=True)
    y = layer(x)
    assert y.grad_fn is not None and "Addmm" in type(y.grad_fn).__name__
    y.sum().backward()
    torch.testing.assert_close(x.grad, layer.weight.sum(0).expand(4, 16))
    assert torch.equal(layer(x.detach()).detach(), torch.nn.functional.linear(x.detach(), layer.weight, layer.bias).detach())


@needs_onednn
def test_session_runs_agree_with_plain_kernels_to_rounding(monkeypatch):
    """The whole capture on the fast GEMM against the same capture on torch's own."""
    import transformer_viewer.model.kernels.linear as linear_module

    took = []
    use = linear_module._use_onednn
    monkeypatch.setattr(linear_module, "_use_onednn", lambda x, w: took.append(use(x, w)) or took[-1])
    loaded = LoadedModel(model=_model(), config=CFG, format="native", source="<t>", name="t")
    s = Session(loaded, pattern_dtype=np.float32)
    s.set_prompt("one two three four five six seven eight nine ten " * 4)
    fast = s.run()
    assert took and all(took)  # every linear of the capture took the fast path
    s.set_prompt(s.tokens.text + " ")
    s.set_prompt("one two three four five six seven eight nine ten " * 4)
    n_fast = len(took)
    with plain_kernels():
        plain = s.run()
    K, L = model_reduction(CFG), CFG.n_layer
    for layer in range(L):
        assert_float32_close(fast.overview_max[layer], plain.overview_max[layer], reduction=K, depth=layer + 1,
                             scale=1.0, what=f"layer {layer} attention overview")
    assert_float32_close(fast.next.probs, plain.next.probs, reduction=K, depth=L + 1, scale=1.0, what="next-token probs")
    assert_float32_close(fast.token_logprobs[1:], plain.token_logprobs[1:], reduction=K, depth=L + 1,
                         what="token log-probabilities")
    assert not any(took[n_fast:])


@pytest.mark.parametrize("T", [1, 5, 255, 256, 257, 700])
@pytest.mark.parametrize("special", ["none", "nan", "inf", "-inf"])
def test_column_max_equals_torch_max_with_ties_and_specials(T, special):
    from transformer_viewer.model.capture.capture_readers import column_max

    g = torch.Generator().manual_seed(T)
    x = torch.randn(T, 40, generator=g)
    x[T // 2] = x[0]  # ties: the first row holding the maximum is the one named
    x[:, 7] = 0.5  # a whole column of ties
    x[T - 1, 9] = x[:, 9].max()  # the last row ties the maximum of a column
    if T > 3 and special != "none":
        # A NaN anywhere in a column is that column's maximum; an inf is where the shortcut stops.
        x[T - 2, 3] = x[1, 4] = float(special)
    values, where = column_max(x)
    want_values, want_where = x.max(dim=0)
    torch.testing.assert_close(values, want_values, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(where, want_where)
    # Written into a trace's arrays, as the capture does.
    into_values, into_where = torch.full((40,), -7.0), torch.full((40,), -7, dtype=torch.int64)
    column_max(x, into_values, into_where)
    torch.testing.assert_close(into_values, want_values, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(into_where, want_where)


def test_pattern_rows_with_a_window_equal_the_masked_full_product():
    from transformer_viewer.model.kernels.attention_kernels import pattern_rows, query_blocks

    g = torch.Generator().manual_seed(0)
    T, window = 3 * QUERY_BLOCK + 16, 37
    qh, kh = torch.randn(1, 2, T, 8, generator=g), torch.randn(1, 2, T, 8, generator=g)
    full = attention_pattern(qh, kh, window, 0.0)  # (1, 2, T, T)
    for a, b in query_blocks(T):
        rows = pattern_rows(qh, kh, a, b, window, 0.0)  # (1, 2, b - a, b)
        torch.testing.assert_close(rows, full[:, :, a:b, :b], rtol=0, atol=1e-6)
        assert torch.all(full[:, :, a:b, b:] == 0)
        assert torch.all(rows[..., : max(0, a - window + 1)] == 0)  # keys out of every row's window


@pytest.mark.parametrize("window", [QUERY_BLOCK, 2 * QUERY_BLOCK - 1, 10 ** 6])  # b == window, b == window + 1
def test_a_window_wider_than_the_rows_changes_no_bit(window):
    """Blocks of rows whose keys all lie inside the window skip its mask (Phi-3.5 declares a
    262,144-token window): the same bits as no window at all, and as the masked full product."""
    from transformer_viewer.model.kernels.attention_kernels import pattern_rows, query_blocks

    g = torch.Generator().manual_seed(1)
    T = 3 * QUERY_BLOCK + 16
    qh, kh = torch.randn(1, 2, T, 8, generator=g), torch.randn(1, 2, T, 8, generator=g)
    full = attention_pattern(qh, kh, window, 0.0)  # (1, 2, T, T)
    for a, b in query_blocks(T):
        rows = pattern_rows(qh, kh, a, b, window, 0.0)
        torch.testing.assert_close(rows, full[:, :, a:b, :b], rtol=0, atol=1e-6)
        if b <= window:
            assert torch.equal(rows, pattern_rows(qh, kh, a, b, 0, 0.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_hiding_the_future_equals_masked_fill(dtype):
    from transformer_viewer.model.kernels.attention_kernels import future_mask, hide_future_

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 9, 20, generator=g).to(dtype)
    scores[0, 0, 2, 13], scores[1, 2, 4, 11] = -0.0, 0.0  # zeros below the diagonal keep their sign
    want = scores.clone()
    want[..., 11:20].masked_fill_(future_mask(9, "cpu"), float("-inf"))
    got = hide_future_(scores[..., 11:20])  # a strided square, as a block of query rows has
    assert got.data_ptr() == scores[..., 11:20].data_ptr()  # in place
    assert torch.equal(scores, want)
    assert torch.equal(torch.signbit(scores), torch.signbit(want))
