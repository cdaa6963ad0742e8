import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_session
from transformer_viewer.model.analysis.scan import head_scan, kl_divergence
from transformer_viewer.model.decoder.hooks import count_hooks
from transformer_viewer.model.errors import ModelError


def _single(layer, head, base=None):
    m = np.zeros((2, 4), dtype=bool) if base is None else base.copy()
    m[layer, head] = True
    return m


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_entries_equal_predict_with_that_head_masked(ablation):
    s = tiny_session()
    s.run()
    res = head_scan(s, ablation=ablation, position=7)
    ref = tiny_session()  # a fresh session: nothing shared with the scan's caches
    base = ref.predict(None, ablation, 7)
    assert res.target_id == int(base.top_ids[0])
    assert res.baseline_metric == pytest.approx(np.log(base.probs[res.target_id]), rel=1e-6)
    assert res.done.all() and not res.cancelled and res.metric == "logprob"
    for layer in range(2):
        for head in range(4):
            out = ref.predict(_single(layer, head), ablation, 7)
            p = out.probs[res.target_id]
            assert res.target_probs[layer, head] == pytest.approx(float(p), rel=1e-5)
            assert res.metric_values[layer, head] == pytest.approx(np.log(p), abs=1e-5)
            assert res.effect[layer, head] == pytest.approx(np.log(p) - np.log(base.probs[res.target_id]), abs=1e-5)
            # The scan runs a layer's heads as one batch, whose products round apart from a lone
            # run's: each log-probability moves by about float32's spacing at the logits' size
            # (~1e-6), and KL sums p times those moves.
            assert res.kl[layer, head] == pytest.approx(kl_divergence(base.probs, out.probs), rel=1e-4, abs=2e-6)
    assert np.abs(res.effect).max() > 1e-3, "masking a head of this model should move the prediction"
    assert (res.kl >= 0).all()


def test_distractor_gives_the_logit_difference():
    s = tiny_session()
    res = head_scan(s, target=262, distractor=3797)
    assert res.metric == "logit_diff"
    ids = torch.tensor([s.tokens.ids])
    with torch.no_grad():
        logits = s.model(ids)[0][0, -1]
    assert res.baseline_metric == pytest.approx(float(logits[262] - logits[3797]), abs=1e-4)
    m = _single(1, 3)
    with torch.no_grad():
        from transformer_viewer.model.capture.interventions import head_mask_hooks
        from transformer_viewer.model.decoder.hooks import hooks
        with hooks(s.model, head_mask_hooks(m, "zero")):
            lm = s.model(ids)[0][0, -1]
    assert res.metric_values[1, 3] == pytest.approx(float(lm[262] - lm[3797]), abs=1e-4)


def test_base_mask_heads_are_skipped_and_others_stack_on_it():
    s = tiny_session()
    base = _single(0, 0)
    res = head_scan(s, base_mask=base)
    assert not res.done[0, 0] and np.isnan(res.effect[0, 0])
    assert res.n_done == 7
    ref = tiny_session()
    b = ref.predict(base)
    assert res.target_id == int(b.top_ids[0])
    out = ref.predict(_single(1, 2, base))
    assert res.target_probs[1, 2] == pytest.approx(float(out.probs[res.target_id]), rel=1e-5)
    assert [c for c in res.ranked("effect")][0] == min(
        ((la, h) for la in range(2) for h in range(4) if res.done[la, h]), key=lambda c: res.effect[c])


def test_scan_leaves_the_session_cache_intact_and_resumes_per_layer():
    s = tiny_session()
    trace = s.run()
    resid = s.residuals()
    snapshot = [r.clone() for r in resid]
    started = []
    # Count which block each predict starts from: a head in layer 1 must not rerun layer 0.
    orig = s.model.run_blocks

    def spy(x, start=0, stop=None, **kwargs):
        started.append(start)
        return orig(x, start, stop, **kwargs)
    s.model.run_blocks = spy
    head_scan(s)
    s.model.run_blocks = orig
    assert started == [0, 1]  # one batch per layer, each from its own layer
    assert count_hooks(s.model) == 0
    for a, b, c in zip(resid, s.residuals(), snapshot, strict=True):
        assert a is b and torch.equal(b, c)
    again = s.run()
    assert again.first_layer_run == 2  # the cached trace survived: nothing recomputed
    np.testing.assert_array_equal(again.attention, trace.attention)


def test_cancel_stops_within_the_current_forward_and_returns_partial():
    s = tiny_session()
    s.run()
    calls = {"n": 0}
    blocks_after_cancel = []

    def is_cancelled():
        calls["n"] += 1
        # Layer 0's heads run as one batch, checked three times (before it, then as blocks 0
        # and 1 start); layer 1's twice (before it, as block 1 starts): the fifth check is
        # inside that batch's forward.
        return calls["n"] > 4

    def count(_m, _i, _o):
        if calls["n"] > 4:
            blocks_after_cancel.append(1)
    handles = [b.register_forward_hook(count) for b in s.model.blocks]
    progress = []
    res = head_scan(s, progress=lambda d, t: progress.append((d, t)), is_cancelled=is_cancelled)
    for h in handles:
        h.remove()
    assert res.cancelled
    assert res.n_done == 4
    assert blocks_after_cancel == [], "no block may finish once cancel is seen"
    assert progress[0] == (0, 8) and progress[-1] == (res.n_done, 8)
    assert np.isnan(res.effect[~res.done]).all() and not np.isnan(res.effect[res.done]).any()
    assert count_hooks(s.model) == 0
    # the session is still usable and unchanged
    assert s.run().first_layer_run == 2


def test_cancel_before_start():
    s = tiny_session()
    res = head_scan(s, is_cancelled=lambda: True)
    assert res.cancelled and res.n_done == 0


def test_bad_tokens_are_clear_errors():
    s = tiny_session()
    with pytest.raises(ModelError, match="outside the vocabulary"):
        head_scan(s, target=50257)
    with pytest.raises(ModelError, match="distractor is the target"):
        head_scan(s, target=5, distractor=5)
    with pytest.raises(ModelError, match="ablation"):
        head_scan(s, ablation="noise")


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_predict_many_equals_predict_for_each_mask(ablation):
    s = tiny_session()
    s.run()
    masks = [_single(layer, head) for layer in range(2) for head in range(4)] + [np.zeros((2, 4), dtype=bool)]
    many = s.predict_many(masks, ablation, 7, top_k=3)
    ref = tiny_session()
    for mask, out in zip(masks, many, strict=True):
        want = ref.predict(mask, ablation, 7, top_k=3, update_cache=False)
        assert out.position == want.position == 7
        np.testing.assert_allclose(out.probs, want.probs, rtol=1e-5, atol=1e-8)
        np.testing.assert_array_equal(out.top_ids, want.top_ids)
    assert s.predict_many([], ablation, 7) == []
    alone = s.predict_many(masks[5:6], ablation, 7)[0]  # a batch of one is a lone run, bit for bit
    np.testing.assert_array_equal(alone.probs, ref.predict(masks[5], ablation, 7, update_cache=False).probs)


def test_a_long_prompt_scans_one_head_at_a_time():
    from transformer_viewer.model.analysis.scan import SCAN_BATCH_BYTES, batch_size
    from transformer_viewer.model.decoder.config import GPTConfig

    cfg = GPTConfig(n_layer=30, n_head=9, n_kv_head=3, n_embd=576, n_mlp=1536, vocab_size=49152, block_size=8192)
    assert batch_size(cfg, 64) == 9  # a short prompt: a whole layer's heads together
    assert batch_size(cfg, 8192) == 1  # a long one: each run alone, as much memory as a prediction
    assert 4 * 1024 * (4 * 576 + 3 * 1536) * batch_size(cfg, 1024) <= SCAN_BATCH_BYTES


def test_mask_hooks_keep_their_own_copy_of_a_read_only_mask():
    import warnings

    from transformer_viewer.model.capture.interventions import head_mask_hooks
    from transformer_viewer.model.decoder.hooks import hooks

    s = tiny_session()
    mask = _single(1, 2)
    want = s.predict(mask, update_cache=False).probs
    mask.flags.writeable = False  # as a trace's mask is
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when it wraps a read-only array
        named = head_mask_hooks(mask, "zero")
    editable = mask.copy()
    named = head_mask_hooks(editable, "zero")
    editable[1, 2] = False  # an edit after the hooks were made does not reach them
    ids = torch.tensor([s.tokens.ids])
    with torch.inference_mode(), hooks(s.model, named):
        logits = s.model(ids)[0][0, -1]
    np.testing.assert_allclose(torch.softmax(logits, -1).numpy(), want, rtol=1e-5, atol=1e-7)
