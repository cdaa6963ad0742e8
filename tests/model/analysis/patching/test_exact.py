"""Exact activation patching (model/analysis/patching/exact.py) on the tiny GPT-2: each kind
equals the same patch written by hand in a plain forward (under a head mask and feature clamps
too), and the end cases are the runs they must be."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.models import TINY, tiny_session
from tests.helpers.patch_clamps import clamped_session
from tests.helpers.patch_references import CLEAN, CORRUPTED, assert_grid_matches_hand_patches, metric_atol
from transformer_viewer.model.analysis.patching.exact import EXACT_WHATS, patch_grid, patched_metrics
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.capture.interventions import Intervention, Patch
from transformer_viewer.model.errors import Cancelled, ModelError

MARY, JOHN = 5335, 1757  # " Mary", " John" in GPT-2's vocabulary
LOGIT_SCALE = 10.0  # the tiny model's logits stay below this (largest_logit: about 7)


@pytest.fixture(scope="module")
def session():
    s = tiny_session(CLEAN)
    s.set_corrupted(CORRUPTED)
    return s


def test_the_pair_is_described(session):
    pair = session.prompt_pair()
    assert pair.same_length and pair.clean_tokens == len(session.tokens.ids)
    assert pair.differing == tuple(i for i, (a, b) in enumerate(zip(session.tokens.ids, session.corrupted.ids,
                                                                    strict=True)) if a != b)
    assert len(pair.differing) == 1 and str(pair.differing[0]) in pair.describe()


@pytest.mark.parametrize("kind", ["logit-diff", "logprob", "kl"])
def test_whole_clean_residual_at_layer_0_restores_the_clean_metric(session, kind):
    metric = PatchMetric.make(kind, {"logit-diff": (MARY, JOHN), "logprob": (MARY,), "kl": ()}[kind])
    grid = patch_grid(session, "resid", metric)
    whole = Intervention.make(session.config, patches=[Patch("clean", "resid_pre", 0)])
    (value,) = patched_metrics(session, [whole], metric)
    assert abs(value - grid.clean) <= metric_atol(session, LOGIT_SCALE)
    # The one differing position carries all the difference at layer 0.
    assert abs(grid.raw[0, session.prompt_pair().differing[0]] - grid.clean) <= metric_atol(session, LOGIT_SCALE)
    assert grid.clean != grid.corrupted


def test_patching_what_does_not_differ_gives_the_corrupted_metric(session):
    metric = PatchMetric.make("logit-diff", (MARY, JOHN))
    grid = patch_grid(session, "embed", metric)
    same = [p for p in range(grid.raw.shape[1]) if p not in session.prompt_pair().differing]
    np.testing.assert_allclose(grid.raw[0, same], grid.corrupted, atol=metric_atol(session, LOGIT_SCALE), rtol=0)
    (nothing,) = patched_metrics(session, [Intervention.make(session.config, patches=[
        Patch("clean", "embed", 0, None, (0,))])], metric)
    assert abs(nothing - grid.corrupted) <= metric_atol(session, LOGIT_SCALE)


def test_embedding_every_head_and_every_mlp_patched_gives_the_clean_run(session):
    L = session.config.n_layer
    patches = [Patch("clean", "embed", 0)] + [Patch("clean", s, la) for la in range(L) for s in ("z", "mlp_out")]
    run = Intervention.make(session.config, patches=patches)
    metric = PatchMetric.make("kl")
    (kl,) = patched_metrics(session, [run], metric)
    assert abs(kl) <= metric_atol(session, LOGIT_SCALE)
    patched = session.predict_patched(run)
    clean = session.predict()
    np.testing.assert_allclose(patched.probs, clean.probs, atol=metric_atol(session, 1.0), rtol=1e-4)


@pytest.mark.parametrize("what", EXACT_WHATS)
def test_each_kind_equals_a_hand_written_patch(session, what):
    assert_grid_matches_hand_patches(session, what, PatchMetric.make("logit-diff", (MARY, JOHN)))


@pytest.mark.parametrize("what", ["resid", "heads-by-pos", "pattern", "v"])
def test_noising_and_an_earlier_metric_position_equal_hand_patches(session, what):
    assert_grid_matches_hand_patches(session, what, PatchMetric.make("kl", position=7), direction="noise")


@pytest.mark.parametrize("ablation", ["zero", "mean"])
@pytest.mark.parametrize("what", ["resid", "attn", "heads", "k"])
def test_the_head_mask_applies_to_both_runs(session, what, ablation):
    mask = np.zeros((TINY.n_layer, TINY.n_head), dtype=bool)
    mask[0, 1] = mask[1, 3] = True
    assert_grid_matches_hand_patches(session, what, PatchMetric.make("logprob", (MARY,)), mask=mask,
                                      ablation=ablation)


@pytest.mark.parametrize("ablation", ["zero", "mean"])
@pytest.mark.parametrize("what, direction", [("resid", "denoise"), ("heads-by-pos", "noise"), ("attn", "denoise"),
                                             ("heads", "noise"), ("embed", "denoise")])
def test_feature_clamps_apply_to_both_runs_with_the_head_mask(tmp_path, what, direction, ablation):
    """A positional clamp before the prompts differ, one after, and one at every position at the
    hook point attn grids patch: each cell equals a full forward with the clamps' hooks, then
    the patch's, written by hand."""
    s, clamps, hand = clamped_session(tmp_path)
    mask = np.zeros((TINY.n_layer, TINY.n_head), dtype=bool)
    mask[1, 2] = True
    metric = PatchMetric.make("logit-diff", (MARY, JOHN))
    grid = assert_grid_matches_hand_patches(s, what, metric, direction, mask, ablation, clamps=clamps,
                                            clamp_hooks=hand)
    plain = patch_grid(s, what, metric, direction, Intervention.make(TINY, mask, ablation), layer=1)
    assert np.abs(grid.raw - plain.raw).max() > 1e-3 and grid.clean != plain.clean


def test_cells_computes_only_those_asked_for(session):
    metric = PatchMetric.make("logit-diff", (MARY, JOHN))
    full = patch_grid(session, "attn", metric)
    asked = [(0, 3), (1, 9), (1, 13)]
    some = patch_grid(session, "attn", metric, cells=asked)
    for cell in asked:
        assert some.raw[cell] == pytest.approx(full.raw[cell], abs=metric_atol(session, LOGIT_SCALE))
    assert np.isnan(some.raw).sum() == some.raw.size - len(asked)
    with pytest.raises(ModelError, match="outside"):
        patch_grid(session, "attn", metric, cells=[(5, 0)])


def test_cancel_stops_within_one_batch(session):
    metric = PatchMetric.make("logit-diff", (MARY, JOHN))
    seen = []
    with pytest.raises(Cancelled):
        patch_grid(session, "resid", metric, progress=lambda done, total: seen.append((done, total)),
                   is_cancelled=lambda: bool(seen))
    assert len(seen) == 1 and seen[0][0] < seen[0][1]
    # Within a batch, at the next layer: the first batch never finishes.
    calls = []
    with pytest.raises(Cancelled):
        patch_grid(session, "heads", metric, progress=lambda done, total: seen.append((done, total)),
                   is_cancelled=lambda: calls.append(1) or len(calls) > 1)
    assert len(seen) == 1


def test_grouped_key_value_heads_are_labelled(session):
    grid = patch_grid(session, "k", PatchMetric.make("kl"))
    assert grid.col_axis == "key/value head" and grid.note == ""  # GPT-2: one key/value head per head


def test_a_changed_prompt_drops_the_pair(session):
    s = tiny_session(CLEAN)
    s.set_corrupted(CORRUPTED)
    s.set_prompt(CORRUPTED)
    with pytest.raises(ModelError, match="no corrupted prompt"):
        s.prompt_pair()


def test_patches_are_checked_once_and_compared_by_value(session):
    config = session.config
    a = Intervention.make(config, patches=[Patch("clean", "z", 1, 2, (3, 4))])
    b = Intervention.make(config, patches=[Patch("clean", "z", 1, 2, (3, 4))])
    assert a == b and hash(a) == hash(b) and a != Intervention.none(config)
    assert "z 1 head 2 at 3,4 from clean" in a.describe()
    for bad, message in [(Patch("other", "z", 0), "source"), (Patch("clean", "zz", 0), "site"),
                         (Patch("clean", "z", 9), "layers"), (Patch("clean", "z", 0, 4), "head 4"),
                         (Patch("clean", "mlp_out", 0, 0), "no heads"), (Patch("clean", "z", 0, 0, (2, 1)), "sorted"),
                         (Patch("clean", "resid_pre", 0, None, ()), "positions")]:
        with pytest.raises(ModelError, match=message):
            Intervention.make(config, patches=[bad])
    with pytest.raises(ModelError, match="one source"):
        Intervention.make(config, patches=[Patch("clean", "z", 0), Patch("corrupted", "z", 1)])
    with pytest.raises(ModelError, match="predict_patched"):
        a.hooks()


@pytest.mark.parametrize("longer", ["clean", "corrupted"])
def test_prompts_of_different_lengths(longer):
    s = tiny_session(CLEAN if longer == "corrupted" else CLEAN + " the")
    s.set_corrupted(CORRUPTED + " the" if longer == "corrupted" else CORRUPTED)
    assert not s.prompt_pair().same_length and "differ in length" in s.prompt_pair().describe()
    metric = PatchMetric.make("logit-diff", (MARY, JOHN))
    for what in ("resid", "embed", "attn", "mlp", "heads-by-pos"):
        with pytest.raises(ModelError, match="differ in length.*heads, pattern"):
            patch_grid(s, what, metric, layer=0)
    with pytest.raises(ModelError, match="from the end"):
        patch_grid(s, "heads", PatchMetric.make("kl", position=3))
    assert_grid_matches_hand_patches(s, "heads", metric)
    assert_grid_matches_hand_patches(s, "pattern", metric, direction="noise")
    assert_grid_matches_hand_patches(s, "v", PatchMetric.make("kl", position=-2))


def test_batches_share_a_layer_and_waste_few_rows():
    from transformer_viewer.model.analysis.patching.exact import MIN_BATCH_ROWS, batched

    T = 64
    runs = [(Patch("clean", "resid_pre", la, None, (p,)),) for la in range(3) for p in range(T)]
    runs += [(Patch("clean", "z", 1, h, None),) for h in range(4)]
    batches = batched(range(len(runs)), runs, 16, T, same_before=5)
    assert sorted(i for b in batches for i in b) == list(range(len(runs)))
    for batch in batches:
        assert len(batch) <= 16 and len({runs[i][0].layer for i in batch}) == 1
        firsts = [max(runs[i][0].positions[0] if runs[i][0].positions else 0, 5) for i in batch]
        needed, padded = sum(T - f for f in firsts), len(batch) * (T - min(firsts))
        assert padded <= max(MIN_BATCH_ROWS, 1.25 * needed) or len(batch) == 1
    # Without the row test, one batch per layer would compute every row of every run.
    assert sum(len(b) * (T - min(max(runs[i][0].positions[0] if runs[i][0].positions else 0, 5) for i in b))
               for b in batches) < 0.7 * 3 * T * (T - 5) + 4 * (T - 5)
