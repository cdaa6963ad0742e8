"""Exact activation patching (model/analysis/patching/exact.py) on the tiny GPT-2: each kind
equals the same patch written by hand in a plain forward, and the end cases are the runs they
must be."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import TINY, tiny_session
from tests.helpers.patching import CLEAN, CORRUPTED, metric_of, reference_logits
from tests.helpers.tolerances import float32_atol, model_reduction
from transformer_viewer.model.analysis.patching.exact import EXACT_WHATS, layout, patch_grid, patched_metrics
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.capture.interventions import Intervention, Patch
from transformer_viewer.model.errors import Cancelled, ModelError

MARY, JOHN = 5335, 1757  # " Mary", " John" in GPT-2's vocabulary


@pytest.fixture(scope="module")
def session():
    s = tiny_session(CLEAN)
    s.set_corrupted(CORRUPTED)
    return s


def ids(session, name):
    return torch.tensor([(session.tokens if name == "clean" else session.corrupted).ids])


def atol(session, scale: float = 10.0) -> float:
    # A metric is a difference of logits (or log-probabilities): twice a logit's float32 bound.
    return 2 * float32_atol(model_reduction(session.config), session.config.n_layer + 1, scale)


def clean_logits(session, position=-1):
    return reference_logits(session.model, ids(session, "clean"), ids(session, "clean"), [], position=position)


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
    assert abs(value - grid.clean) <= atol(session)
    # The one differing position carries all the difference at layer 0.
    assert abs(grid.raw[0, session.prompt_pair().differing[0]] - grid.clean) <= atol(session)
    assert grid.clean != grid.corrupted


def test_patching_what_does_not_differ_gives_the_corrupted_metric(session):
    metric = PatchMetric.make("logit-diff", (MARY, JOHN))
    grid = patch_grid(session, "embed", metric)
    same = [p for p in range(grid.raw.shape[1]) if p not in session.prompt_pair().differing]
    np.testing.assert_allclose(grid.raw[0, same], grid.corrupted, atol=atol(session), rtol=0)
    (nothing,) = patched_metrics(session, [Intervention.make(session.config, patches=[
        Patch("clean", "embed", 0, None, (0,))])], metric)
    assert abs(nothing - grid.corrupted) <= atol(session)


def test_embedding_every_head_and_every_mlp_patched_gives_the_clean_run(session):
    L = session.config.n_layer
    patches = [Patch("clean", "embed", 0)] + [Patch("clean", s, la) for la in range(L) for s in ("z", "mlp_out")]
    run = Intervention.make(session.config, patches=patches)
    metric = PatchMetric.make("kl")
    (kl,) = patched_metrics(session, [run], metric)
    assert abs(kl) <= atol(session)
    patched = session.predict_patched(run)
    clean = session.predict()
    np.testing.assert_allclose(patched.probs, clean.probs, atol=atol(session, 1.0), rtol=1e-4)


def _assert_grid_matches_hand_patches(session, what, metric, direction="denoise", mask=None, ablation="zero",
                                      layer=1):
    change = Intervention.make(session.config, mask, ablation)
    grid = patch_grid(session, what, metric, direction, change, layer=layer)
    source = "clean" if direction == "denoise" else "corrupted"
    target = "corrupted" if source == "clean" else "clean"
    cells = layout(session.config, what, source, len(session.tokens.ids), range(len(session.tokens.ids)), layer)
    position = -1 if metric.position is None else metric.position
    reference_clean = reference_logits(session.model, ids(session, "clean"), ids(session, "clean"), [], mask, ablation,
                                       position)
    for cell, patches in cells.cell_patches.items():
        logits = reference_logits(session.model, ids(session, target), ids(session, source), patches, mask, ablation,
                                  position)
        expected = metric_of(metric, logits, reference_clean, session.n_vocab)
        assert abs(grid.raw[cell] - expected) <= atol(session), (what, cell, grid.raw[cell], expected)


@pytest.mark.parametrize("what", EXACT_WHATS)
def test_each_kind_equals_a_hand_written_patch(session, what):
    _assert_grid_matches_hand_patches(session, what, PatchMetric.make("logit-diff", (MARY, JOHN)))


@pytest.mark.parametrize("what", ["resid", "heads-by-pos", "pattern", "v"])
def test_noising_and_an_earlier_metric_position_equal_hand_patches(session, what):
    _assert_grid_matches_hand_patches(session, what, PatchMetric.make("kl", position=7), direction="noise")


@pytest.mark.parametrize("ablation", ["zero", "mean"])
@pytest.mark.parametrize("what", ["resid", "attn", "heads", "k"])
def test_the_head_mask_applies_to_both_runs(session, what, ablation):
    mask = np.zeros((TINY.n_layer, TINY.n_head), dtype=bool)
    mask[0, 1] = mask[1, 3] = True
    _assert_grid_matches_hand_patches(session, what, PatchMetric.make("logprob", (MARY,)), mask=mask,
                                      ablation=ablation)


def test_cells_computes_only_those_asked_for(session):
    metric = PatchMetric.make("logit-diff", (MARY, JOHN))
    full = patch_grid(session, "attn", metric)
    asked = [(0, 3), (1, 9), (1, 13)]
    some = patch_grid(session, "attn", metric, cells=asked)
    for cell in asked:
        assert some.raw[cell] == pytest.approx(full.raw[cell], abs=atol(session))
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
