"""Patched runs (model/capture/patched_runs.py): the layer-reuse and row-skipping paths, and
batches of unlike patches, equal a plain forward with the patch written by hand, also under
feature clamps (their hooks written by hand too)."""

from __future__ import annotations

import numpy as np
import torch

from tests.helpers.models import tiny_session
from tests.helpers.patch_clamps import clamped_session
from tests.helpers.patch_references import CLEAN, CORRUPTED, reference_logits
from tests.helpers.tolerances import assert_float32_close, model_reduction
from transformer_viewer.model.capture.interventions import Intervention, Patch
from transformer_viewer.model.capture.patched_runs import Alignment, PatchedBatch, patched_final


def _setup():
    s = tiny_session(CLEAN)
    s.set_corrupted(CORRUPTED)
    sources = s.patch_sources()
    return s, sources.runs["corrupted"], sources.runs["clean"]


def _logits(s, final):
    with torch.no_grad():
        return s.model.unembed(final)  # (B, V)


def test_reuse_and_skipped_rows_equal_a_full_forward():
    s, target, source = _setup()
    T = target.T
    mask = np.zeros((s.config.n_layer, s.config.n_head), dtype=bool)
    runs = [(Patch("clean", "resid_pre", 1, None, (9,)),), (Patch("clean", "z", 1, 2, (9, T - 1)),),
            (Patch("clean", "attn_out", 0, None, (4, 9)),), (Patch("clean", "k", 1, 0, (9,)),),
            (Patch("clean", "embed", 0, None, (9,)),), (Patch("clean", "resid_pre", 2, None, (T - 1,)),)]
    with torch.no_grad():
        skipped = patched_final(s.model, PatchedBatch(mask, "zero", target, source, Alignment(T), True), runs)
        whole = patched_final(s.model, PatchedBatch(mask, "zero", target, source, Alignment(T, 0, T - 1), False), runs)
        alone = torch.cat([patched_final(s.model, PatchedBatch(mask, "zero", target, source, Alignment(T), True), [r])
                           for r in runs])
        differ = s.prompt_pair().differing[0]  # the prompts are the same before it: so is every activation
        shared = patched_final(s.model, PatchedBatch(mask, "zero", target, source, Alignment(T, same_before=differ),
                                                     True), runs)
    expected = torch.stack([reference_logits(s.model, torch.tensor([s.corrupted.ids]), torch.tensor([s.tokens.ids]),
                                             list(r)) for r in runs])
    depth = s.config.n_layer + 1
    for got in (skipped, whole, alone, shared):
        assert_float32_close(_logits(s, got), expected, reduction=model_reduction(s.config), depth=depth,
                             what="patched logits")
    # The patches do change the run: the comparison is not of the corrupted run with itself.
    corrupted = _logits(s, target.resid[-1][:, -1])
    assert (expected - corrupted).abs().amax(dim=-1).min() > 1e-3


def test_an_earlier_metric_position_runs_only_up_to_it():
    s, target, source = _setup()
    mask = np.zeros((s.config.n_layer, s.config.n_head), dtype=bool)
    runs = [(Patch("clean", "resid_pre", 0, None, (9,)),), (Patch("clean", "v", 0, 1, None),)]
    seen = []
    handle = s.model.blocks[0].register_forward_hook(lambda _m, _i, out: seen.append(out.shape[1]))
    try:
        with torch.no_grad():
            final = patched_final(s.model, PatchedBatch(mask, "zero", target, source, Alignment(11), True), runs)
    finally:
        handle.remove()
    assert seen == [11]  # positions after the metric's are never computed
    expected = torch.stack([reference_logits(s.model, torch.tensor([s.corrupted.ids]), torch.tensor([s.tokens.ids]),
                                             list(r), position=10) for r in runs])
    assert_float32_close(_logits(s, final), expected, reduction=model_reduction(s.config),
                         depth=s.config.n_layer + 1, what="patched logits at position 10")


def test_rows_before_the_prompts_differ_are_not_recomputed():
    s, target, source = _setup()
    mask = np.zeros((s.config.n_layer, s.config.n_head), dtype=bool)
    differ = s.prompt_pair().differing[0]
    align = s.patch_alignment(target, source, None, True)
    assert align.same_before == differ
    seen = []
    handle = s.model.blocks[0].mlp.register_forward_hook(lambda _m, _i, out: seen.append(out.shape[1]))
    try:
        with torch.no_grad():
            final = patched_final(s.model, PatchedBatch(mask, "zero", target, source, align, True),
                                  [(Patch("clean", "z", 0, 1, None),)])
    finally:
        handle.remove()
    assert seen == [target.T - differ]
    expected = reference_logits(s.model, torch.tensor([s.corrupted.ids]), torch.tensor([s.tokens.ids]),
                                [Patch("clean", "z", 0, 1, None)])
    assert_float32_close(_logits(s, final)[0], expected, reduction=model_reduction(s.config),
                         depth=s.config.n_layer + 1, what="patched logits")


def test_under_clamps_reuse_skipped_rows_and_the_final_resid_equal_a_full_forward(tmp_path):
    """Clamps at a position before the first computed row (in the cached rows), at one after it
    and at every position: batches skipping rows, whole runs, and runs up to an earlier metric
    position all equal a full forward with the clamp hooks and the patch hook in place."""
    s, clamps, hand = clamped_session(tmp_path)
    mask = np.zeros((s.config.n_layer, s.config.n_head), dtype=bool)
    mask[1, 2] = True
    change = Intervention.make(s.config, mask, clamps=clamps)
    sources = s.patch_sources(change)
    target, source = sources.runs["corrupted"], sources.runs["clean"]
    T = target.T
    differ = s.prompt_pair().differing[0]
    assert 4 < differ < 11 < T - 1  # one clamp in the cached rows, one among the computed ones
    runs = [(Patch("clean", "resid_pre", 1, None, (9,)),), (Patch("clean", "z", 1, 2, (9, T - 1)),),
            (Patch("clean", "attn_out", 0, None, (9, 11)),), (Patch("clean", "k", 1, 0, (12,)),),
            (Patch("clean", "embed", 0, None, (9,)),), (Patch("clean", "resid_pre", 2, None, (T - 1,)),),
            (Patch("clean", "attn_out", 0, None, None),)]
    clamped = s.patch_clamp_hooks(change)

    def final(align, skip, batch):
        with torch.no_grad():
            return patched_final(s.model, PatchedBatch(mask, "zero", target, source, align, skip, clamped), batch)

    skipped = final(Alignment(T, same_before=differ), True, runs)
    whole = final(Alignment(T, 0, T - 1), False, runs)
    alone = torch.cat([final(Alignment(T, same_before=differ), True, [r]) for r in runs])
    ids = torch.tensor([s.corrupted.ids]), torch.tensor([s.tokens.ids])
    expected = torch.stack([reference_logits(s.model, *ids, list(r), mask, clamps=hand) for r in runs])
    for got in (skipped, whole, alone):
        assert_float32_close(_logits(s, got), expected, reduction=model_reduction(s.config),
                             depth=s.config.n_layer + 1, what="patched logits under clamps")
    unclamped = torch.stack([reference_logits(s.model, *ids, list(r), mask) for r in runs])
    assert (expected - unclamped).abs().amax(dim=-1).min() > 1e-3  # every run feels the clamps
    # Up to an earlier metric position (12): the run's T is 13, and the clamps count from it.
    early = final(Alignment(13, same_before=differ), True, runs)
    expected = torch.stack([reference_logits(s.model, *ids, list(r), mask, position=12, clamps=hand) for r in runs])
    assert_float32_close(_logits(s, early), expected, reduction=model_reduction(s.config),
                         depth=s.config.n_layer + 1, what="patched logits at position 12 under clamps")
