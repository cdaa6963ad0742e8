import numpy as np
import pytest

from tests.helpers.models import tiny_session
from transformer_viewer.model.analysis.diff import lens_diff, trace_diff
from transformer_viewer.model.analysis.lens import logit_lens
from transformer_viewer.model.errors import ModelError


def test_unmasked_diff_is_exactly_zero():
    # Two independent sessions, each a full forward: no array is shared between the runs.
    a, b = tiny_session(), tiny_session()
    clean, other = a.run(), b.run()
    assert clean.attention is not other.attention
    la, lb = logit_lens(a), logit_lens(b, reference_ids=logit_lens(a).top_ids)
    d = trace_diff(clean, other, la, lb)
    assert d.is_zero
    for arr in (d.attention, d.resid_norms, d.mlp_post, d.head_norms, d.next_probs, d.lens_probs):
        assert np.count_nonzero(arr) == 0
    assert d.attention.shape == clean.attention.shape and d.attention.dtype == clean.attention.dtype


def test_masked_diff_starts_at_the_masked_layer():
    s = tiny_session()
    clean = s.run()
    clean_lens = logit_lens(s)
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 2] = True
    masked = s.run(mask)
    masked_lens = logit_lens(s, reference_ids=clean_lens.top_ids)
    d = trace_diff(clean, masked, clean_lens, masked_lens)
    assert not d.is_zero
    assert not np.any(d.attention[0]) and not np.any(d.mlp_post[0]) and not np.any(d.head_norms[0])
    assert not np.any(d.attention[1])  # a layer's own pattern is computed before its heads are masked
    assert np.any(d.mlp_post[1]) and np.any(d.head_norms[1, 2])
    assert not np.any(d.resid_norms[:4])  # embed, 0.pre, 0.mid, 1.pre
    assert np.any(d.resid_norms[4:])
    np.testing.assert_array_equal(d.head_norms[1, 2], -clean.head_norms[1, 2])  # zero-ablated: all gone
    np.testing.assert_allclose(d.resid_norms, masked.resid_norms - clean.resid_norms)
    assert not np.any(d.lens_probs[:2]) and np.any(d.lens_probs[2])
    np.testing.assert_array_equal(d.lens_probs, lens_diff(clean_lens, masked_lens))


def test_masking_layer_zero_changes_later_attention():
    s = tiny_session()
    clean = s.run()
    mask = np.zeros((2, 4), dtype=bool)
    mask[0, 0] = True
    clean_lens = logit_lens(s)
    masked_lens = logit_lens(s, s.masked_residuals(mask), reference_ids=clean_lens.top_ids)
    d = trace_diff(clean, s.run(mask), clean_lens, masked_lens)
    assert np.any(d.attention[1]) and not np.any(d.attention[0])
    assert np.any(d.lens_probs[1])


def test_mismatched_runs_are_refused():
    a, b = tiny_session(), tiny_session("something else entirely")
    with pytest.raises(ModelError, match="different prompts"):
        trace_diff(a.run(), b.run())
    s = tiny_session()
    clean = s.run()
    lens = logit_lens(s)
    with pytest.raises(ModelError, match="reference_ids"):
        lens_diff(lens, logit_lens(s, reference_ids=np.zeros_like(lens.top_ids)))
    with pytest.raises(ModelError, match="positions"):
        trace_diff(clean, s.run(position=3))
