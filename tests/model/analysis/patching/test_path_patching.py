"""Path patching equals the two-forward construction written by hand with hooks: first a run of
the patched prompt with every head's and MLP's output frozen at its own values except the
sender's output, taken from the source run, read at the receiver's input; then a run of the
patched prompt with only that input replaced. On GPT-2's layout and on the family switches
(grouped and multi-query heads, sandwich and post norms, parallel blocks, QK-norms); under feature
clamps, with each clamp's edit frozen along the path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.family_switches import switch_model
from tests.helpers.hook_patches import (
    cache_of,
    clean_logprobs_of,
    metric_of,
    pair_session,
    prompt_pair,
    replacing,
)
from tests.helpers.models import randomize_, tiny_gpt
from tests.helpers.saes import attach_random_sae, standard_clamp_hook
from tests.helpers.tolerances import assert_float32_close, largest_logit, model_reduction
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.analysis.patching.path_patching import (
    path_patch_grid,
    path_patch_grid_of,
    receiver_slot,
)
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import Cancelled, ModelError

GPT3 = GPTConfig(n_layer=3, n_head=4, n_embd=32, block_size=64, vocab_size=300)
METRICS = {"logit-diff": PatchMetric.make("logit-diff", (11, 12)), "kl": PatchMetric.make("kl")}



def _frozen_but_sender(own: dict, theirs: dict, sender: tuple[int, int], L: int) -> list:
    """Hooks holding every head's z and every MLP's output at the patched run's own (`own`),
    but the sender head's z at the source run's (`theirs`)."""
    s, h = sender
    frozen = []
    for layer in range(L):
        z = own[f"blocks.{layer}.attn.hook_z"].clone()
        if layer == s:
            z[:, :, h] = theirs[f"blocks.{layer}.attn.hook_z"][:, :, h]
        frozen += [(f"blocks.{layer}.attn.hook_z", replacing(z, slice(None))),
                   (f"blocks.{layer}.hook_mlp_out", replacing(own[f"blocks.{layer}.hook_mlp_out"], slice(None)))]
    return frozen

def reference(model, clean, corrupted, receiver, input, sender, metric, direction, change=None):
    """The metric of the path sender -> receiver's input, by the two forwards."""
    config = model.config
    L = config.n_layer
    mask_hooks = change.hooks() if change is not None else []
    patched, source = (corrupted, clean) if direction == "denoise" else (clean, corrupted)
    z_names = [f"blocks.{layer}.attn.hook_z" for layer in range(L)]
    mlp_names = [f"blocks.{layer}.hook_mlp_out" for layer in range(L)]
    own = cache_of(model, patched, z_names + mlp_names, mask_hooks)
    theirs = cache_of(model, source, z_names, mask_hooks)
    frozen = _frozen_but_sender(own, theirs, sender, L)
    R, r = receiver
    name = f"blocks.{R}.attn.hook_{input}"
    fork = cache_of(model, patched, [name], frozen)[name]  # the receiver's input along the path
    slot = r if input == "q" else r // (config.n_head // config.kv_heads)
    clean_lp = clean_logprobs_of(model, clean, metric, mask_hooks)
    return metric_of(model, patched, metric, [*mask_hooks, (name, replacing(fork, (slice(None), slice(None), slot)))],
                     clean_lp)


def check_against_reference(model, clean, corrupted, receiver, input, metric, direction, change=None):
    grid = path_patch_grid_of(model, clean, corrupted, receiver, input, metric, direction, change)
    config = model.config
    R = receiver[0]
    expected = np.array([[reference(model, clean, corrupted, receiver, input, (s, h), metric, direction, change)
                          for h in range(config.n_head)] for s in range(R)])
    assert_float32_close(grid.raw[:R], expected, reduction=model_reduction(config), depth=config.n_layer + 1,
                         scale=max(1.0, largest_logit(model, corrupted)), what=f"path into {receiver} {input}")
    unpatched = grid.corrupted if direction == "denoise" else grid.clean
    if metric.kind != "kl":  # (kl is quadratic near the clean run: noising paths move it by little)
        assert np.abs(expected - unpatched).max() > 1e-3  # the paths carry something
    return grid


@pytest.mark.parametrize("direction", ["denoise", "noise"])
@pytest.mark.parametrize("input", ["q", "k", "v"])
def test_each_sender_equals_the_hand_written_path_on_gpt2s_layout(input, direction):
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=6, vocab=GPT3.vocab_size, changed=(1, 3))
    for metric in METRICS.values():
        check_against_reference(model, clean, corrupted, (2, 1), input, metric, direction)


@pytest.mark.parametrize("name, input, receiver", [
    ("llama_gqa", "k", (1, 3)), ("llama_gqa", "v", (1, 0)), ("llama_gqa", "q", (1, 2)),
    ("window_softcap", "v", (1, 2)), ("window_softcap", "q", (1, 1)),
    ("neox_parallel", "q", (1, 0)), ("gptj_shared", "k", (1, 3)),
    ("olmo2_post", "q", (1, 2)), ("qwen3_headnorm", "k", (1, 1)),
])
def test_each_sender_equals_the_hand_written_path_on_the_family_switches(name, input, receiver):
    model = randomize_(switch_model(name), seed=1)
    clean, corrupted = prompt_pair(T=6, vocab=model.config.vocab_size, changed=(0, 2))
    check_against_reference(model, clean, corrupted, receiver, input, METRICS["logit-diff"], "denoise")


def test_a_grouped_key_value_head_is_named_in_the_note():
    config = switch_model("llama_gqa").config
    assert receiver_slot(config, (1, 3), "k")[1] == 1
    assert receiver_slot(config, (1, 3), "q")[1] == 3
    note = receiver_slot(config, (1, 3), "v")[2]
    assert "key/value head 1" in note and "1.2-1.3" in note


def test_a_sender_in_the_receivers_layer_or_above_has_no_effect():
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=6, vocab=GPT3.vocab_size, changed=(1, 3))
    metric = METRICS["logit-diff"]
    grid = path_patch_grid_of(model, clean, corrupted, (1, 2), "q", metric)
    assert np.all(grid.raw[1:] == np.float32(grid.corrupted))
    assert np.all(grid.normalised[1:] == 0)
    assert np.abs(grid.raw[0] - grid.corrupted).max() > 1e-3
    # The hand-written construction agrees: a sender in layer 1 or 2 cannot reach layer 1's input.
    for sender in [(1, 0), (2, 3)]:
        value = reference(model, clean, corrupted, (1, 2), "q", sender, metric, "denoise")
        assert value == pytest.approx(grid.corrupted, abs=1e-4)


def test_the_head_mask_applies_to_both_runs():
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=6, vocab=GPT3.vocab_size, changed=(1, 3))
    mask = np.zeros((3, 4), dtype=bool)
    mask[0, 1] = mask[2, 2] = True
    for ablation in ("zero", "mean"):
        change = Intervention.make(GPT3, mask, ablation)
        grid = check_against_reference(model, clean, corrupted, (2, 0), "v", METRICS["kl"], "denoise", change)
        if ablation == "zero":  # a zero-ablated sender writes nothing in either run
            assert_float32_close(grid.raw[0, 1], grid.corrupted, reduction=model_reduction(GPT3),
                                 depth=GPT3.n_layer + 1, scale=max(1.0, largest_logit(model, corrupted)),
                                 what="a zero-ablated sender's path")


def test_positions_after_the_metrics_do_not_change_the_grid():
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=7, vocab=GPT3.vocab_size, changed=(1, 2))
    metric = PatchMetric.make("logit-diff", (11, 12), position=4)
    grid = path_patch_grid_of(model, clean, corrupted, (2, 3), "k", metric)
    cut = path_patch_grid_of(model, clean[:5], corrupted[:5], (2, 3), "k", metric)
    np.testing.assert_array_equal(grid.raw, cut.raw)


def test_batches_of_senders_give_the_runs_one_at_a_time_give():
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=6, vocab=GPT3.vocab_size, changed=(1, 3))
    metric = METRICS["logit-diff"]
    whole = path_patch_grid_of(model, clean, corrupted, (2, 1), "q", metric)
    one_by_one = path_patch_grid_of(model, clean, corrupted, (2, 1), "q", metric, memory_budget=1)
    assert_float32_close(one_by_one.raw, whole.raw, reduction=model_reduction(GPT3), depth=4,
                         scale=max(1.0, largest_logit(model, corrupted)))


def test_progress_counts_sender_runs_and_cancel_stops_between_batches():
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=6, vocab=GPT3.vocab_size, changed=(1, 3))
    seen = []
    path_patch_grid_of(model, clean, corrupted, (2, 1), "q", METRICS["kl"], progress=lambda d, n: seen.append((d, n)))
    assert seen[0] == (0, 8) and seen[-1] == (8, 8)
    seen.clear()
    with pytest.raises(Cancelled):
        path_patch_grid_of(model, clean, corrupted, (2, 1), "q", METRICS["kl"], memory_budget=1,
                           progress=lambda d, n: seen.append(d), is_cancelled=lambda: len(seen) >= 3)
    assert seen[-1] == 2  # one sender per batch: two ran before the cancel was seen


def test_bad_input_is_one_line():
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=6, vocab=GPT3.vocab_size)
    metric = METRICS["kl"]
    for receiver, input, match in [((3, 0), "q", "layer 3 does not exist"), ((1, 4), "q", "head 4 does not exist"),
                                   ((1, 0), "o", "must be one of q, k, v")]:
        with pytest.raises(ModelError, match=match):
            path_patch_grid_of(model, clean, corrupted, receiver, input, metric)
    with pytest.raises(ModelError, match="same number of tokens"):
        path_patch_grid_of(model, clean, torch.cat([corrupted, corrupted[:1]]), (1, 0), "q", metric)


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_the_sessions_grid_equals_the_one_from_its_own_runs(direction):
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=6, vocab=GPT3.vocab_size, changed=(1, 3))
    session = pair_session(model, clean, corrupted)
    metric = METRICS["logit-diff"]
    grid = path_patch_grid(session, (2, 1), "k", metric, direction)
    alone = path_patch_grid_of(model, clean, corrupted, (2, 1), "k", metric, direction)
    assert_float32_close(grid.raw, alone.raw, reduction=model_reduction(GPT3), depth=4,
                         scale=max(1.0, largest_logit(model, corrupted)))
    assert (grid.clean, grid.corrupted) == pytest.approx((alone.clean, alone.corrupted), abs=1e-4)
    assert grid.note == alone.note


def test_the_session_refuses_prompts_of_different_lengths_in_one_line():
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=6, vocab=GPT3.vocab_size)
    session = pair_session(model, clean, corrupted[:4])
    with pytest.raises(ModelError, match=r"differ in length \(6 and 4 tokens\)"):
        path_patch_grid(session, (1, 0), "q", METRICS["kl"])


def _clamp_edit_recorders(points, seen):
    """Around each clamp hook point: hooks that keep the activation before and after the clamp."""
    def keep(key):
        def hook(_m, _i, act):
            seen[key] = act
        return hook
    return {name: ((name, keep((name, "before"))), (name, keep((name, "after")))) for name in points}


def clamped_reference(model, clean, corrupted, receiver, input, sender, metric, direction, mask_hooks, clamp_hooks):
    """The path sender -> receiver's input under clamps, by the two forwards: both runs under the
    head mask and the clamps; along the path every head's and MLP's output and every clamp's
    edit are frozen at the patched run's, so the sender's change reaches the receiver directly."""
    L = model.config.n_layer
    patched, source = (corrupted, clean) if direction == "denoise" else (clean, corrupted)
    z_names = [f"blocks.{layer}.attn.hook_z" for layer in range(L)]
    mlp_names = [f"blocks.{layer}.hook_mlp_out" for layer in range(L)]
    seen = {}
    around = _clamp_edit_recorders({name for name, _ in clamp_hooks}, seen)
    recorded = [*mask_hooks, *[h for name, hook in clamp_hooks for h in (around[name][0], (name, hook),
                                                                         around[name][1])]]
    own = cache_of(model, patched, z_names + mlp_names, recorded)
    theirs = cache_of(model, source, z_names, [*mask_hooks, *clamp_hooks])
    edits = {name: seen[(name, "after")] - seen[(name, "before")] for name in around}  # each clamp's own edit
    frozen = [(name, lambda _m, _i, act, d=d: act + d) for name, d in edits.items()]
    frozen += _frozen_but_sender(own, theirs, sender, L)
    R, r = receiver
    name = f"blocks.{R}.attn.hook_{input}"
    fork = cache_of(model, patched, [name], frozen)[name]
    everything = [*mask_hooks, *clamp_hooks]
    clean_lp = clean_logprobs_of(model, clean, metric, everything)
    return metric_of(model, patched, metric, [*everything, (name, replacing(fork, (slice(None), slice(None), r)))],
                     clean_lp)


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_feature_clamps_apply_to_both_runs_and_a_path_is_direct(tmp_path, direction):
    model = tiny_gpt(GPT3)
    clean, corrupted = prompt_pair(T=6, vocab=GPT3.vocab_size, changed=(1, 3))
    session = pair_session(model, clean, corrupted)
    resid, w_resid = attach_random_sae(session, tmp_path, "blocks.1.hook_resid_pre", seed=1)
    attn, w_attn = attach_random_sae(session, tmp_path, "blocks.0.hook_attn_out", seed=2)
    mlp, w_mlp = attach_random_sae(session, tmp_path, "blocks.2.hook_mlp_out", seed=3)
    at_resid = (FeatureClamp(resid, 5, "set", 4.0, 2), FeatureClamp(resid, 9, "set", 3.0, 4))
    at_attn = (FeatureClamp(attn, 7, "scale", 3.0),)
    at_mlp = (FeatureClamp(mlp, 3, "set", 5.0, 5), FeatureClamp(mlp, 11, "scale", 0.0))
    mask = np.zeros((GPT3.n_layer, GPT3.n_head), dtype=bool)
    mask[1, 0] = True
    change = Intervention.make(GPT3, mask, clamps=at_resid + at_attn + at_mlp)
    hand = [("blocks.0.hook_resid_post", standard_clamp_hook(w_resid, at_resid)),
            ("blocks.0.hook_attn_out", standard_clamp_hook(w_attn, at_attn)),
            ("blocks.2.hook_mlp_out", standard_clamp_hook(w_mlp, at_mlp))]
    metric, receiver = METRICS["logit-diff"], (2, 1)
    grid = path_patch_grid(session, receiver, "v", metric, direction, change)
    expected = np.array([[clamped_reference(model, clean, corrupted, receiver, "v", (s, h), metric, direction,
                                            change.without_clamps().hooks(), hand)
                          for h in range(GPT3.n_head)] for s in range(2)])
    assert_float32_close(grid.raw[:2], expected, reduction=model_reduction(GPT3), depth=GPT3.n_layer + 1,
                         scale=max(1.0, largest_logit(model, corrupted)), what="path under clamps")
    plain = path_patch_grid(session, receiver, "v", metric, direction, Intervention.make(GPT3, mask))
    assert np.abs(grid.raw[:2] - plain.raw[:2]).max() > 1e-3 and grid.clean != plain.clean
