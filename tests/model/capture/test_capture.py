"""Capture: the trace's numbers equal what a plain forward computes, and the incremental path
(recompute from the first changed layer) equals a full recompute."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_loaded
from tests.helpers.tolerances import assert_float32_close, assert_probs_close, largest_logit, model_reduction
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.capture.trace import resid_labels
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.hooks import hooks

PROMPT = "The cat sat on the mat because the cat was tired, and then"
CONFIG = GPTConfig(n_layer=3, n_head=4, n_embd=32, block_size=64, vocab_size=50257)


@pytest.fixture(scope="module")
def loaded():
    return tiny_loaded(CONFIG, seed=11)


def session(loaded, prompt=PROMPT, **kw) -> Session:
    kw.setdefault("keep_full", True)  # the full arrays too, to compare them with a plain forward
    s = Session(loaded, pattern_dtype=np.float32, **kw)
    s.set_prompt(prompt)
    return s


def mask_of(*heads) -> np.ndarray:
    m = np.zeros((CONFIG.n_layer, CONFIG.n_head), dtype=bool)
    for layer, h in heads:
        m[layer, h] = True
    return m


def assert_same_trace(a, b, atol=1e-6):
    for field in ("attention", "resid_norms", "mlp_post", "head_norms", "token_logprobs", "overview_max",
                  "overview_mean", "mlp_max", "mlp_mean"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=1e-5, atol=atol, err_msg=field)
    np.testing.assert_allclose(a.next.probs, b.next.probs, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(a.next.top_ids, b.next.top_ids)
    np.testing.assert_array_equal(a.mask, b.mask)


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_incremental_recompute_equals_full_recompute(loaded, ablation):
    s = session(loaded)
    clean = s.run()
    assert clean.first_layer_run == 0
    steps = [mask_of((1, 2)), mask_of((1, 2), (2, 0)), mask_of((2, 0)), mask_of((0, 3), (2, 0)), mask_of()]
    expected_start = [1, 2, 1, 0, 0]
    for mask, start in zip(steps, expected_start, strict=True):
        inc = s.run(mask, ablation=ablation)
        assert inc.first_layer_run == start
        full = session(loaded).run(mask, ablation=ablation)
        assert full.first_layer_run == 0
        assert_same_trace(inc, full)
    # Back to the clean run: identical to the first one.
    assert_same_trace(s.run(), clean)


def test_changing_only_the_ablation_recomputes_from_the_first_masked_layer(loaded):
    s = session(loaded)
    s.run(mask_of((1, 1)), ablation="zero")
    mean = s.run(mask_of((1, 1)), ablation="mean")
    assert mean.first_layer_run == 1
    assert_same_trace(mean, session(loaded).run(mask_of((1, 1)), ablation="mean"))


def test_masks_change_the_output(loaded):
    s = session(loaded)
    clean = s.run()
    masked = s.run(mask_of((0, 0), (0, 1), (1, 2)))
    assert np.abs(clean.next.probs - masked.next.probs).max() > 1e-3
    assert np.abs(clean.resid_norms[3:] - masked.resid_norms[3:]).max() > 1e-3
    np.testing.assert_array_equal(clean.resid_norms[:2], masked.resid_norms[:2])  # before any masked head


@pytest.mark.parametrize("ablation", ["zero", "mean"])
@pytest.mark.parametrize("position", [None, 4, -3])
def test_predict_equals_the_next_token_of_run(loaded, ablation, position):
    mask = mask_of((1, 0), (2, 3))
    s = session(loaded)
    s.run()
    pred = s.predict(mask, ablation=ablation, position=position, top_k=7)
    trace = session(loaded).run(mask, ablation=ablation, position=position, top_k=7)
    full = trace.next
    assert pred.position == full.position
    # The prediction's last layer reads its last rows alone: another GEMM shape, the float32 rule.
    bound = dict(reduction=model_reduction(CONFIG), depth=CONFIG.n_layer + 1)
    scale = largest_logit(loaded.model, trace.token_ids)
    assert_probs_close(pred.probs, full.probs, logit_scale=scale, **bound, what="probabilities")
    np.testing.assert_array_equal(pred.top_ids, full.top_ids)
    assert_float32_close(pred.top_logits, full.top_logits, scale=scale, **bound, what="top logits")


def test_token_logprobs_and_next_distribution_match_a_plain_forward(loaded):
    s = session(loaded)
    trace = s.run(position=5, top_k=4)
    ids = torch.from_numpy(trace.token_ids)[None]
    with torch.no_grad():
        logits = loaded.model(ids)[0][0, :, :50257]  # (T, V)
    logprobs = torch.log_softmax(logits, dim=-1)
    T = trace.n_tokens
    expected = np.full(T, np.nan, dtype=np.float32)
    expected[1:] = logprobs[torch.arange(T - 1), ids[0, 1:]].numpy()
    assert np.isnan(trace.token_logprobs[0])
    # oneDNN's products against torch's: the float32 rule (a log-probability: twice its logits' error)
    bound = dict(reduction=model_reduction(CONFIG), depth=CONFIG.n_layer + 1)
    scale = float(logits.abs().max())
    assert_float32_close(trace.token_logprobs[1:], expected[1:], scale=2 * scale, **bound, what="log-probabilities")
    assert_probs_close(trace.next.probs, logprobs[5].exp(), logit_scale=scale, **bound, what="probabilities")
    top = torch.topk(logits[5], 4)
    np.testing.assert_array_equal(trace.next.top_ids, top.indices.numpy())
    assert_float32_close(trace.next.top_logits, top.values, scale=scale, **bound, what="top logits")
    assert trace.next.position == 5


@pytest.mark.parametrize("blocks", ["several", "a lone last position"])
def test_token_logprobs_by_blocks_of_positions_match_a_plain_forward(loaded, monkeypatch, blocks):
    from transformer_viewer.model.capture import unembedding

    s = session(loaded)
    whole = s.run(position=7)
    T = whole.n_tokens
    monkeypatch.setattr(unembedding, "ROW_BLOCK", 4 if blocks == "several" else T - 1)  # T - 1: joins the last
    seen = []
    final = s.residuals()[-1][0]
    ids = torch.from_numpy(whole.token_ids)
    with torch.inference_mode():
        token_lp, _, logprobs_p = unembedding.token_logprobs(loaded.model, final, ids, 7, 50257,
                                                             progress=lambda d, n: seen.append((d, n)))
        stopped = unembedding.token_logprobs(loaded.model, final, ids, 7, 50257, is_cancelled=lambda: True)
    np.testing.assert_allclose(token_lp[1:], whole.token_logprobs[1:], rtol=1e-5, atol=1e-5)
    assert np.isnan(token_lp[0])
    np.testing.assert_allclose(logprobs_p.exp().numpy(), whole.next.probs, rtol=1e-5, atol=1e-7)
    done = [d for d, _ in seen]
    assert done == sorted(done) and seen[-1] == (50257, 50257)
    assert len(seen) == (-(-T // 4) if blocks == "several" else 1) * -(-50257 // unembedding.VOCAB_BLOCK)
    assert stopped == (None, None, None)


def _raw_activations(loaded, ids, mask=None):
    """Every activation the trace summarises, captured with plain hooks (no Session)."""
    from transformer_viewer.model.capture.interventions import head_mask_hooks

    raw = {}

    def keep(name):
        def hook(_m, _i, out):
            raw[name] = out[0].detach().clone()
        return hook

    names = ["hook_embed"] + [f"blocks.{layer}.{h}" for layer in range(CONFIG.n_layer)
                              for h in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "attn.hook_pattern",
                                        "attn.hook_z", "mlp.hook_post")]
    named = (head_mask_hooks(mask, "zero") if mask is not None else []) + [(n, keep(n)) for n in names]
    with hooks(loaded.model, named), torch.no_grad():
        loaded.model(ids)
    return raw


def test_resid_norms_patterns_and_mlp_equal_the_raw_activations(loaded):
    s = session(loaded)
    trace = s.run()
    raw = _raw_activations(loaded, torch.from_numpy(trace.token_ids)[None])
    L = CONFIG.n_layer
    assert trace.resid_labels == resid_labels(L) and trace.resid_norms.shape == (2 * L + 2, trace.n_tokens)
    rows = [raw["hook_embed"]]
    for layer in range(L):
        rows += [raw[f"blocks.{layer}.hook_resid_pre"], raw[f"blocks.{layer}.hook_resid_mid"]]
    rows.append(raw[f"blocks.{L - 1}.hook_resid_post"])
    expected = torch.stack([r.norm(dim=-1) for r in rows]).numpy()  # (2L + 2, T)
    np.testing.assert_allclose(trace.resid_norms, expected, rtol=1e-5, atol=1e-5)
    for layer in range(L):
        np.testing.assert_allclose(trace.attention[layer], raw[f"blocks.{layer}.attn.hook_pattern"].numpy(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(trace.mlp_post[layer], raw[f"blocks.{layer}.mlp.hook_post"].numpy(),
                                   rtol=1e-5, atol=1e-5)


def _head_writes(loaded, z, layer):
    """(nh, T) norms of each head's write into the residual: z_h @ W_O[h-th slice]."""
    c = CONFIG
    w = loaded.model.blocks[layer].attn.c_proj.weight.detach()  # (C, C): out = z_flat @ w.T
    w_heads = w.T.reshape(c.n_head, c.head_size, c.n_embd)  # (nh, hs, C)
    return torch.einsum("tnh,nhc->ntc", z, w_heads).norm(dim=-1).numpy()  # (nh, T)


def test_head_norms_match_and_a_zeroed_head_has_norm_zero(loaded):
    mask = mask_of((1, 2))
    trace = session(loaded).run(mask)
    raw = _raw_activations(loaded, torch.from_numpy(trace.token_ids)[None], mask)
    for layer in range(CONFIG.n_layer):
        np.testing.assert_allclose(trace.head_norms[layer], _head_writes(loaded, raw[f"blocks.{layer}.attn.hook_z"], layer),
                                   rtol=1e-4, atol=1e-5)
    assert np.all(trace.head_norms[1, 2] == 0.0)
    assert np.all(trace.head_norms[1, [0, 1, 3]] > 0.0)


def test_mean_ablation_writes_the_same_vector_at_every_position(loaded):
    trace = session(loaded).run(mask_of((2, 1)), ablation="mean")
    norms = trace.head_norms[2, 1]
    np.testing.assert_allclose(norms, np.full_like(norms, norms[0]), rtol=1e-5)
    assert norms[0] > 0


def test_trace_is_frozen_numpy(loaded):
    trace = session(loaded).run()
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.ablation = "mean"
    for field in ("attention", "resid_norms", "mlp_post", "head_norms", "token_logprobs", "token_ids",
                  "overview_max", "overview_mean", "mlp_max", "mlp_argmax", "mlp_mean"):
        assert isinstance(getattr(trace, field), np.ndarray)
    assert trace.attention.shape == (3, 4, trace.n_tokens, trace.n_tokens)
    assert trace.overview_max.shape == (3, 4, trace.n_tokens, trace.n_tokens)  # one token per cell at this length
    compact = session(loaded, keep_full=False).run()
    assert compact.attention is None and compact.mlp_post is None


@pytest.mark.parametrize("masked", [False, True])
def test_a_cancelled_capture_stops_at_a_layer_and_leaves_the_session_as_it_was(loaded, masked):
    from transformer_viewer.model.decoder.hooks import count_hooks
    from transformer_viewer.model.errors import Cancelled

    s = session(loaded)
    clean = s.run()
    seen = []

    def progress(layer, n_layer):
        seen.append((layer, n_layer))

    mask = mask_of((1, 2)) if masked else None
    if not masked:
        s.set_prompt(PROMPT + " and more")  # a new prompt: every layer runs
    with pytest.raises(Cancelled):
        s.run(mask, progress=progress, is_cancelled=lambda: len(seen) >= 2)
    first = 1 if masked else 0  # a mask in layer 1 reuses layer 0
    assert seen == [(first, CONFIG.n_layer), (first + 1, CONFIG.n_layer)]
    assert count_hooks(s.model) == 0
    after = s.run(mask)  # from the cache the cancelled run left alone
    assert after.first_layer_run == (1 if masked else 0)
    fresh = session(loaded, PROMPT if masked else PROMPT + " and more").run(mask)
    assert_same_trace(after, fresh, atol=0)
    if masked:
        assert_same_trace(s.run(), clean, atol=0)


def test_a_capture_cancelled_in_its_log_probabilities_raises_too(loaded):
    from transformer_viewer.model.errors import Cancelled

    s = session(loaded)
    unembedding = []  # cancelled once the unembedding has begun: past every layer
    with hooks(s.model, [("hook_final", lambda *_: unembedding.append(1))]), pytest.raises(Cancelled):
        s.run(is_cancelled=lambda: bool(unembedding))
    assert unembedding and s.run().token_logprobs is not None


def test_a_cancelled_prediction_stops_at_a_layer_and_leaves_the_cache(loaded):
    from transformer_viewer.model.decoder.hooks import count_hooks
    from transformer_viewer.model.errors import Cancelled

    s = session(loaded, keep_full=False)
    s.run()
    seen = []
    with pytest.raises(Cancelled):
        s.predict(mask_of((0, 1)), update_cache=False, progress=lambda layer, n: seen.append((layer, n)),
                  is_cancelled=lambda: len(seen) >= 1)
    assert seen == [(0, CONFIG.n_layer)] and count_hooks(s.model) == 0
    assert s.run().first_layer_run == CONFIG.n_layer  # the cache is the clean run still
    whole = s.predict(mask_of((0, 1)), update_cache=False, progress=lambda layer, n: seen.append((layer, n)))
    assert seen[1:] == [(layer, CONFIG.n_layer) for layer in range(CONFIG.n_layer)]
    np.testing.assert_array_equal(whole.probs, s.predict(mask_of((0, 1)), update_cache=False).probs)
