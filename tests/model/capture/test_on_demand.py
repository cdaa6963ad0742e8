"""Long prompts in bounded memory: a trace keeps O(T) per layer, and what it does not keep (a
head's full pattern, any tile of it, a layer's MLP activations) is recomputed on demand equal to
what a plain forward computes; pooled overviews equal pooling the full pattern."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_loaded
from tests.helpers.tolerances import assert_float32_close, assert_probs_close, largest_logit, model_reduction
from transformer_viewer.model.capture.interventions import head_mask_hooks
from transformer_viewer.model.capture.on_demand import (
    head_pattern,
    iter_pattern_rows,
    mlp_activations,
    pattern_tile,
    save_head_pattern,
)
from transformer_viewer.model.capture.overview import cell_size, pool_pattern
from transformer_viewer.model.capture.session import KEPT_RUNS, Session
from transformer_viewer.model.checkpoints.checkpoint import LoadedModel
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.hooks import hooks
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels.attention_kernels import LARGEST_BLOCK, QUERY_BLOCK
from transformer_viewer.model.tokenizers.tokenizer import Tokenized

CONFIG = GPTConfig(n_layer=3, n_head=4, n_embd=32, block_size=1024, vocab_size=50257)


@pytest.fixture(scope="module")
def loaded():
    return tiny_loaded(CONFIG, seed=5)


def tokens(T: int, seed: int = 0) -> Tokenized:
    ids = np.random.default_rng(seed).integers(0, CONFIG.vocab_size, T)
    labels = tuple(f"t{i}" for i in ids)
    return Tokenized(ids=tuple(int(i) for i in ids), labels=labels, spans=tuple((i, i + 1) for i in range(T)),
                     text="x" * T)


def session(loaded, T: int, **kw) -> Session:
    s = Session(loaded, **kw)
    s.set_tokens(tokens(T))
    return s


def mask_of(*heads) -> np.ndarray:
    m = np.zeros((CONFIG.n_layer, CONFIG.n_head), dtype=bool)
    for layer, h in heads:
        m[layer, h] = True
    return m


def plain_forward(model, ids, mask=None, ablation="zero"):
    """Every layer's full pattern and MLP post-activations from an ordinary forward."""
    kept = {}

    def keep(name):
        def hook(_m, _i, out):
            kept[name] = out[0].clone()
        return hook

    named = [] if mask is None else head_mask_hooks(mask, ablation)
    for layer in range(model.config.n_layer):
        named += [(f"blocks.{layer}.attn.hook_pattern", keep(("pattern", layer))),
                  (f"blocks.{layer}.mlp.hook_post", keep(("mlp", layer)))]
    with torch.no_grad(), hooks(model, named):
        model(torch.as_tensor(ids)[None])
    return kept


# A prompt of several query blocks plus a tail that joins the last one.
T_BLOCKS = 3 * QUERY_BLOCK + 21


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_on_demand_patterns_and_tiles_equal_the_forward(loaded, ablation):
    s = session(loaded, T_BLOCKS)
    s.run()
    mask = mask_of((0, 1), (1, 3))
    trace = s.run(mask, ablation)
    assert trace.attention is None and trace.mlp_post is None  # not kept
    ref = plain_forward(loaded.model, trace.token_ids, mask, ablation)
    clean_ref = plain_forward(loaded.model, trace.token_ids)
    for layer in range(CONFIG.n_layer):
        for head in range(CONFIG.n_head):
            want = ref[("pattern", layer)][head].numpy()
            np.testing.assert_allclose(head_pattern(s, trace, layer, head), want, rtol=0, atol=1e-6)
    # The masked heads changed later layers' patterns, so the check above tells the runs apart.
    assert (ref[("pattern", 2)] - clean_ref[("pattern", 2)]).abs().max().item() > 1e-4
    rng = np.random.default_rng(1)
    for _ in range(12):
        layer, head = int(rng.integers(CONFIG.n_layer)), int(rng.integers(CONFIG.n_head))
        r0, r1 = sorted(int(v) for v in rng.integers(0, T_BLOCKS + 1, 2))
        c0, c1 = sorted(int(v) for v in rng.integers(0, T_BLOCKS + 1, 2))
        want = ref[("pattern", layer)][head, r0:r1, c0:c1].numpy()
        np.testing.assert_allclose(pattern_tile(s, trace, layer, head, (r0, r1), (c0, c1)), want, rtol=0, atol=1e-6)


def test_a_run_no_longer_cached_is_recomputed_under_its_own_mask(loaded):
    s = session(loaded, 90)
    mask = mask_of((0, 2))
    old = s.run(mask, "mean")
    for i in range(KEPT_RUNS + 1):  # push the old run out of the cache
        s.run(mask_of((1, i % CONFIG.n_head)))
    ref = plain_forward(loaded.model, old.token_ids, mask, "mean")
    np.testing.assert_allclose(head_pattern(s, old, 2, 1), ref[("pattern", 2)][1].numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(mlp_activations(s, old, 1), ref[("mlp", 1)].numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("T", [37, 256, 700])
def test_pooled_overviews_equal_pooling_the_full_pattern(loaded, T):
    s = session(loaded, T, pattern_dtype=np.float32)
    trace = s.run(mask_of((1, 0)))
    ref = plain_forward(loaded.model, trace.token_ids, mask_of((1, 0)))
    assert trace.overview_cell == cell_size(T) and trace.overview_max.shape[-1] <= 256
    for layer in range(CONFIG.n_layer):
        full = ref[("pattern", layer)].numpy()  # (nh, T, T)
        mx, mean = pool_pattern(full)
        np.testing.assert_allclose(trace.overview_max[layer], mx, rtol=0, atol=1e-6)
        np.testing.assert_allclose(trace.overview_mean[layer], mean, rtol=1e-5, atol=1e-7)
        if T <= 256:
            np.testing.assert_allclose(trace.overview_max[layer], full, rtol=0, atol=1e-6)
    if T <= 256:  # one token per cell: the mean is the max, one array kept for both
        assert trace.overview_mean is trace.overview_max


@pytest.mark.parametrize("T,max_cells", [(300, 256), (1000, 256), (1100, 256), (257, 16), (64 * 5 + 40, 7)])
def test_the_pooler_fed_block_by_block_equals_pooling_the_whole_pattern(T, max_cells):
    """Cells that straddle query blocks, cut cells at the prompt's end, blocks with a long tail."""
    from transformer_viewer.model.capture.overview import OverviewPooler
    from transformer_viewer.model.kernels.attention_kernels import query_blocks

    g = torch.Generator().manual_seed(T)
    full = torch.rand(2, T, T, generator=g).tril_()  # (nh, T, T), zeros in the future
    pooler = OverviewPooler(2, T, "cpu", max_cells)
    for a, b in query_blocks(T):
        pooler(a, full[None, :, a:b, :b])  # (1, nh, b - a, b), as the forward passes them
    n = pooler.n
    mx, mean = np.empty((2, n, n), np.float32), np.empty((2, n, n), np.float32)
    pooler.finish(mx, mean)
    want_max, want_mean = pool_pattern(full.numpy(), max_cells)
    np.testing.assert_array_equal(mx, want_max)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-7)


def test_pool_pattern_by_hand():
    p = np.arange(25, dtype=np.float64).reshape(5, 5)
    mx, mean = pool_pattern(p, max_cells=3)  # cells of 2 tokens: rows/cols {0,1}, {2,3}, {4}
    assert mx.shape == (3, 3) and mx[0, 0] == 6 and mx[2, 2] == 24 and mx[1, 2] == 19
    assert mean[0, 0] == (0 + 1 + 5 + 6) / 4 and mean[2, 1] == (22 + 23) / 2 and mean[2, 2] == 24


def test_mlp_activations_and_summaries_equal_the_forward(loaded):
    s = session(loaded, 150)
    trace = s.run(mask_of((0, 0), (1, 2)), "zero")
    ref = plain_forward(loaded.model, trace.token_ids, mask_of((0, 0), (1, 2)))
    for layer in range(CONFIG.n_layer):
        want = ref[("mlp", layer)].numpy()  # (T, n_mlp)
        np.testing.assert_allclose(mlp_activations(s, trace, layer), want, rtol=0, atol=1e-6)
        np.testing.assert_allclose(trace.mlp_max[layer], want.max(0), rtol=0, atol=1e-6)
        np.testing.assert_allclose(trace.mlp_mean[layer], want.mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(want[trace.mlp_argmax[layer], np.arange(want.shape[1])], want.max(0))


def test_incremental_run_keeps_earlier_layers_summaries(loaded):
    s = session(loaded, 120)
    clean = s.run()
    masked = s.run(mask_of((2, 1)))
    assert masked.first_layer_run == 2
    np.testing.assert_array_equal(masked.overview_max[:2], clean.overview_max[:2])
    np.testing.assert_array_equal(masked.mlp_max[:2], clean.mlp_max[:2])
    fresh = session(loaded, 120).run(mask_of((2, 1)))
    np.testing.assert_allclose(masked.overview_mean.astype(np.float32), fresh.overview_mean.astype(np.float32),
                               atol=1e-3)
    np.testing.assert_allclose(masked.mlp_mean, fresh.mlp_mean, rtol=1e-5, atol=1e-6)


def test_a_trace_grows_linearly_with_the_prompt(loaded):
    sizes = {T: session(loaded, T).run(logprobs=False).nbytes for T in (512, 768, 1024)}
    # Every per-token array grows by the same amount for each 256 tokens; the overviews are
    # capped at 256 x 256 cells. With full (T, T) patterns the second step would be far larger.
    assert sizes[1024] - sizes[768] == sizes[768] - sizes[512]
    assert sizes[1024] < 1.5 * sizes[512]
    full = session(loaded, 512, keep_full=True).run(logprobs=False)
    assert full.attention.shape == (3, 4, 512, 512) and full.nbytes > sizes[1024]


def test_the_memory_budget_counts_what_a_capture_keeps(loaded):
    s = session(loaded, 600)
    est = s.estimate_bytes(600)
    trace = s.run()
    resid = sum(t.numel() * t.element_size() for t in s.residuals())
    assert trace.nbytes + resid <= est <= trace.nbytes + 4 * resid + 4 * LARGEST_BLOCK * 600 * 4 * 2 + 2 * 600 * 32 * 4
    assert s.estimate_bytes(1024) < 2 * s.estimate_bytes(600)  # linear, not quadratic
    keep = Session(loaded, keep_full=True).estimate_bytes(1024)
    assert keep > s.estimate_bytes(1024) + 3 * 4 * 1024 * 1024 * 2  # the full patterns counted


def test_log_probabilities_can_follow_in_a_second_pass(loaded):
    s = session(loaded, 200)
    now = s.run(mask_of((1, 1)))
    later_trace = session(loaded, 200).run(mask_of((1, 1)), logprobs=False)
    assert later_trace.token_logprobs is None
    # Without the pass, the last position is unembedded alone (another GEMM shape): the float32 rule.
    bound = dict(reduction=model_reduction(CONFIG), depth=CONFIG.n_layer + 1)
    scale = largest_logit(loaded.model, now.token_ids)
    assert_probs_close(later_trace.next.probs, now.next.probs, logit_scale=scale, **bound, what="probabilities")
    s2 = session(loaded, 200)
    t2 = s2.run(mask_of((1, 1)), logprobs=False)
    assert np.isnan(s2.token_logprobs(t2)[0]) and np.isnan(now.token_logprobs[0])
    assert_float32_close(s2.token_logprobs(t2)[1:], now.token_logprobs[1:], scale=2 * scale, **bound,
                         what="log-probabilities")
    assert s2.token_logprobs(t2, is_cancelled=lambda: True) is None


def test_head_pattern_streams_to_npy(loaded, tmp_path):
    s = session(loaded, T_BLOCKS)
    trace = s.run()
    out = tmp_path / "p.npy"
    seen = []
    assert save_head_pattern(s, trace, 1, 2, str(out), progress=lambda done, total: seen.append((done, total)))
    np.testing.assert_array_equal(np.load(out), head_pattern(s, trace, 1, 2))
    assert seen[-1] == (T_BLOCKS, T_BLOCKS) and len(seen) > 1
    blocks = list(iter_pattern_rows(s, trace, 1, 2))
    assert max(len(b) for _, b in blocks) < 2 * QUERY_BLOCK  # one block of rows at a time
    cancelled = tmp_path / "c.npy"
    assert not save_head_pattern(s, trace, 1, 2, str(cancelled), is_cancelled=lambda: True)
    assert sorted(os.listdir(tmp_path)) == ["p.npy"]  # nothing partial left behind


def test_bad_requests_give_one_line(loaded):
    s = session(loaded, 40)
    trace = s.run()
    with pytest.raises(ModelError, match="layer 7 does not exist"):
        head_pattern(s, trace, 7, 0)
    with pytest.raises(ModelError, match="head 9 does not exist"):
        pattern_tile(s, trace, 0, 9, (0, 1), (0, 1))
    with pytest.raises(ModelError, match="outside the prompt"):
        pattern_tile(s, trace, 0, 0, (0, 41), (0, 1))
    s.set_tokens(tokens(40, seed=3))
    with pytest.raises(ModelError, match="another prompt"):
        head_pattern(s, trace, 0, 0)


# -- every family switch that changes scores --------------------------------------------------
FAMILIES = ["window_softcap", "llama_gqa", "neox_parallel"]  # window + soft-cap + scale + MQA; GQA; parallel


def family_session(name: str, T: int) -> Session:
    from tests.helpers.family_switches import switch_model as _model

    model = _model(name, seed=3)
    loaded = LoadedModel(model=model, config=model.config, format="native", source="<test>", name=name)
    s = Session(loaded, pattern_dtype=np.float32)
    ids = np.random.default_rng(T).integers(0, model.config.vocab_size, T)
    s.set_tokens(Tokenized(ids=tuple(int(i) for i in ids), labels=tuple(str(i) for i in ids),
                           spans=tuple((i, i + 1) for i in range(T)), text="x" * T))
    return s


@pytest.mark.parametrize("name", FAMILIES)
def test_on_demand_patterns_overviews_and_mlp_for_family_switches(name):
    T = 2 * QUERY_BLOCK + 50  # longer than the sliding window, several blocks
    s = family_session(name, T)
    trace = s.run(mask_of_shape(s, (0, 1)))
    ref = plain_forward(s.model, trace.token_ids, mask_of_shape(s, (0, 1)))
    for layer in range(s.config.n_layer):
        full = ref[("pattern", layer)].numpy()  # (nh, T, T)
        for head in range(s.config.n_head):
            np.testing.assert_allclose(head_pattern(s, trace, layer, head), full[head], rtol=0, atol=1e-6)
        rng = np.random.default_rng(layer)
        for _ in range(4):  # tiles cut anywhere: across query blocks, the window's edge, the diagonal
            r0, r1 = sorted(int(v) for v in rng.integers(0, T + 1, 2))
            c0, c1 = sorted(int(v) for v in rng.integers(0, T + 1, 2))
            head = int(rng.integers(s.config.n_head))
            np.testing.assert_allclose(pattern_tile(s, trace, layer, head, (r0, r1), (c0, c1)),
                                       full[head, r0:r1, c0:c1], rtol=0, atol=1e-6)
        mx, mean = pool_pattern(full)
        np.testing.assert_allclose(trace.overview_max[layer], mx, rtol=0, atol=1e-6)
        np.testing.assert_allclose(trace.overview_mean[layer], mean, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(mlp_activations(s, trace, layer), ref[("mlp", layer)].numpy(), rtol=0, atol=1e-5)
    if name == "window_softcap":  # the sliding layer really drops keys beyond its window
        assert s.model.blocks[0].attn.window == 37
        assert np.all(head_pattern(s, trace, 0, 0)[T - 1, : T - 37] == 0)
        assert np.any(head_pattern(s, trace, 1, 0)[T - 1, : T - 37] > 0)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_forward_without_the_whole_pattern_equals_the_forward_with_it(name):
    s = family_session(name, 3 * QUERY_BLOCK + 16)
    ids = s._ids
    kept = []
    with torch.no_grad():
        rows_only = s.model(ids)[0]  # nobody reads the pattern: one block of rows at a time
        with hooks(s.model, [("blocks.1.attn.hook_pattern", lambda _m, _i, out: kept.append(out.shape))]):
            whole = s.model(ids)[0]
    assert kept == [(1, s.config.n_head, ids.shape[1], ids.shape[1])]
    torch.testing.assert_close(rows_only, whole, rtol=0, atol=0)  # the same products, block by block


def mask_of_shape(s: Session, *heads) -> np.ndarray:
    m = np.zeros((s.config.n_layer, s.config.n_head), dtype=bool)
    for layer, h in heads:
        m[layer, h] = True
    return m


@pytest.mark.parametrize("name", FAMILIES)
def test_on_demand_patterns_are_the_forwards_own_rows_bit_for_bit(name):
    """Not only close: the rows the no-grad forward computed, block by block, to the last bit."""
    T = 3 * QUERY_BLOCK + 13  # a tail that joins the last block (the models' context is 208)
    s = family_session(name, T)
    trace = s.run()
    L, nh = s.config.n_layer, s.config.n_head
    seen = np.zeros((L, nh, T, T), dtype=np.float32)

    def keep(layer):
        def observe(first, rows):  # (1, nh, r, b)
            seen[layer, :, first:first + rows.shape[2], :rows.shape[3]] = rows[0].numpy()
        return observe

    with torch.inference_mode(), s.inference.observing({layer: keep(layer) for layer in range(L)}):
        s.model(s._ids)
    for layer in range(L):
        for head in range(nh):
            np.testing.assert_array_equal(head_pattern(s, trace, layer, head), seen[layer, head])
        np.testing.assert_array_equal(pattern_tile(s, trace, layer, nh - 1, (T - 70, T), (5, T - 3)),
                                      seen[layer, nh - 1, T - 70:, 5:T - 3])


# Run in a fresh interpreter, since MKL picks its kernels once per process: its AVX2 path (what
# an AVX2-only CPU runs; asked for here whatever the CPU) with two threads splits a lone
# matrix product over threads and rounds it apart from the same matrix in a batched product.
_HEAD_BATCH_SCRIPT = """
import torch
torch.set_num_threads(2)
from transformer_viewer.model.kernels.attention_kernels import pattern_rows, query_blocks
from transformer_viewer.model.capture.on_demand import heads_computed_with
g = torch.Generator().manual_seed(0)
nh, hs, T = 4, 16, 397
qh = torch.randn(1, T, nh, hs, generator=g).transpose(1, 2)  # (1, nh, T, hs), strided as heads_qkv's
kh = torch.randn(1, T, nh, hs, generator=g).transpose(1, 2)
differ = 0
for a, b in query_blocks(T):
    every = pattern_rows(qh, kh, a, b, 0, 0.0)  # (1, nh, b - a, b): the forward's batch
    for head in range(nh):
        h0, h1 = heads_computed_with(head, nh)
        some = pattern_rows(qh[:, h0:h1], kh[:, h0:h1], a, b, 0, 0.0)
        differ += not torch.equal(some[0, head - h0], every[0, head])
print(differ)
"""


def test_a_heads_rows_recomputed_in_its_batch_equal_the_forwards_on_mkls_avx2_path():
    """The batch of heads a recomputed tile is scored in gives the bits of the forward's batch
    of every head, on the kernel path where one head alone would not."""
    import subprocess
    import sys

    env = dict(os.environ, MKL_ENABLE_INSTRUCTIONS="AVX2")
    done = subprocess.run([sys.executable, "-c", _HEAD_BATCH_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.strip() == "0", done.stdout + done.stderr


@pytest.mark.parametrize("window,cap", [(0, 0.0), (37, 0.0), (0, 30.0), (37, 30.0)])
def test_pattern_rows_in_a_reused_buffer_equal_fresh_tensors(window, cap):
    """Scores computed into a buffer that held an earlier, larger block (softmax in place)
    give the bits of a fresh product and softmax."""
    from transformer_viewer.model.kernels.attention_kernels import pattern_rows, query_blocks

    g = torch.Generator().manual_seed(1)
    T = 4 * QUERY_BLOCK + 9
    qh, kh = torch.randn(1, 3, T, 8, generator=g), torch.randn(1, 3, T, 8, generator=g)
    flat = torch.full((3 * QUERY_BLOCK * 2 * T,), float("nan"))
    for a, b in reversed(query_blocks(T)):  # largest first: every later block reuses dirty memory
        rows = flat[: 3 * (b - a) * b].view(1, 3, b - a, b)
        got = pattern_rows(qh, kh, a, b, window, cap, out=rows, scores=rows)
        assert got.data_ptr() == flat.data_ptr()
        assert torch.equal(got, pattern_rows(qh, kh, a, b, window, cap))


def test_a_pooler_with_its_outputs_writes_them_after_the_last_block_and_frees_its_sums():
    """A capture holds one layer's float32 accumulators at a time: none before a layer's first
    block, none after its last (the overview is written then)."""
    from transformer_viewer.model.capture.overview import OverviewPooler
    from transformer_viewer.model.kernels.attention_kernels import query_blocks

    T = 1000
    full = torch.rand(3, T, T, generator=torch.Generator().manual_seed(2)).tril_()  # (nh, T, T)
    n = (T + 3) // 4
    mx, mean = np.full((3, n, n), np.nan, np.float16), np.full((3, n, n), np.nan, np.float16)
    pooler = OverviewPooler(3, T, "cpu", out=mx, mean_out=mean)
    assert pooler.max is None and pooler.sum is None
    blocks = query_blocks(T)
    for a, b in blocks[:-1]:
        pooler(a, full[None, :, a:b, :b])
    assert pooler.max is not None and np.isnan(mx).all()
    a, b = blocks[-1]
    pooler(a, full[None, :, a:b, :b])
    assert pooler.max is None and pooler.sum is None
    want_max, want_mean = pool_pattern(full.numpy())
    np.testing.assert_array_equal(mx, want_max.astype(np.float16))
    np.testing.assert_allclose(mean.astype(np.float32), want_mean, rtol=1e-3, atol=1e-6)
    again = np.zeros_like(mx), np.zeros_like(mean)
    pooler.finish(*again)  # already written and freed: the capture's own finish is a no-op
    assert not again[0].any() and not again[1].any()
