"""Attribution patching: each estimated cell is the metric's derivative along the patch (a
finite-difference check on a tiny model), the estimate approaches the exact patch as the two
prompts' difference shrinks (under feature clamps too, on a session), and the head mask, the kl
metric's noising note, cancel and bad input behave as documented."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.family_switches import VARIANTS, switch_model
from tests.helpers.hook_patches import (
    blending,
    cache_of,
    clean_logprobs_of,
    metric_of,
    pair_session,
    prompt_pair,
    replacing,
)
from tests.helpers.models import randomize_, tiny_gpt
from tests.helpers.saes import attach_random_sae, random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import F32_EPS, SAFETY, assert_float32_close, largest_logit, model_reduction
from transformer_viewer.model.analysis.patching.attribution_patching import (
    ESTIMATE_WHATS,
    estimate_bytes,
    estimate_grid,
    estimate_grid_of,
    max_estimate_tokens,
)
from transformer_viewer.model.analysis.patching.exact import patch_grid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import Cancelled, CaptureTooLargeError, ModelError

# The tiny test model with a small vocabulary: these tests run hundreds of forwards.
TINY = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=64, vocab_size=300)
L, NH = TINY.n_layer, TINY.n_head
METRICS = {"logit-diff": PatchMetric.make("logit-diff", (11, 12)), "logprob": PatchMetric.make("logprob", (11,)),
           "kl": PatchMetric.make("kl")}


def cells(what: str, T: int):
    """(row, col, hook name, index into the activation) of every cell of a `what` grid."""
    for row in range(L + 1 if what == "resid" else L * NH if what == "heads-by-pos" else L):
        for col in range(NH if what == "heads" else T):
            if what == "resid":
                name = f"blocks.{row}.hook_resid_pre" if row < L else f"blocks.{L - 1}.hook_resid_post"
                yield row, col, name, (slice(None), col)
            elif what in ("attn", "mlp"):
                yield row, col, f"blocks.{row}.hook_{what}_out", (slice(None), col)
            elif what == "heads":
                yield row, col, f"blocks.{row}.attn.hook_z", (slice(None), slice(None), col)
            else:
                layer, head = divmod(row, NH)
                yield row, col, f"blocks.{layer}.attn.hook_z", (slice(None), col, head)


@pytest.mark.parametrize("direction", ["denoise", "noise"])
@pytest.mark.parametrize("what", ESTIMATE_WHATS)
def test_each_cell_is_the_metrics_derivative_along_its_patch(what, direction):
    """Central differences of the metric as the cell moves a share eps of the way to the source
    run's value, Richardson-extrapolated, in a float64 model: the estimate is that derivative."""
    model = tiny_gpt(TINY).double()
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    metric = METRICS["logit-diff"]
    grid = estimate_grid_of(model, clean, corrupted, what, metric, direction)
    patched, source = (corrupted, clean) if direction == "denoise" else (clean, corrupted)
    base = grid.corrupted if direction == "denoise" else grid.clean
    names = sorted({name for *_, name, _ in cells(what, 6)})
    source_acts = cache_of(model, source, names)
    eps = 0.02

    def slope(name, index, h):
        up = metric_of(model, patched, metric, [(name, blending(source_acts[name], h, index))])
        down = metric_of(model, patched, metric, [(name, blending(source_acts[name], -h, index))])
        return (up - down) / (2 * h)

    scale = max(1.0, largest_logit(model, patched))
    # The metric is float32 (its logits are cast): each of the four runs rounds by about
    # eps32 * the largest logit, which the extrapolated difference quotient multiplies by
    # 3 / eps; the grid's own float32 values round by as much twice. Its truncation error,
    # O(eps^4), is far below that.
    atol = SAFETY * F32_EPS * scale * (3 / eps + 2)
    worst = 0.0
    for row, col, name, index in cells(what, 6):
        expected = (4 * slope(name, index, eps / 2) - slope(name, index, eps)) / 3
        worst = max(worst, abs(float(grid.raw[row, col]) - base - expected))
    assert worst <= atol, f"{what} {direction}: the estimate is off the derivative by {worst:.3g} (bound {atol:.3g})"
    assert np.abs(grid.raw - base).max() > 50 * atol  # the patches do move the metric


def _exact_grid(model, clean, corrupted, what, metric, direction):
    """Every cell of `what` patched exactly by a hand-written hook: the patched run's metric."""
    patched, source = (corrupted, clean) if direction == "denoise" else (clean, corrupted)
    T = clean.numel()
    names = sorted({name for *_, name, _ in cells(what, T)})
    source_acts = cache_of(model, source, names)
    clean_lp = clean_logprobs_of(model, clean, metric)
    out = np.zeros((L + 1 if what == "resid" else L * NH if what == "heads-by-pos" else L, NH if what == "heads" else T))
    for row, col, name, index in cells(what, T):
        out[row, col] = metric_of(model, patched, metric, [(name, replacing(source_acts[name], index))], clean_lp)
    return out


def _shrunk_model(delta: float, clean, corrupted):
    """The tiny model with the corrupted token's embedding moved to within `delta` (times a
    fixed random direction) of the clean token's: the two prompts' difference shrinks with delta."""
    model = tiny_gpt(TINY)
    t = int((clean != corrupted).nonzero()[0])
    direction = torch.randn(TINY.n_embd, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        model.wte.weight[int(corrupted[t])] = model.wte.weight[int(clean[t])] + delta * direction
    return model


@pytest.mark.parametrize("what", ["resid", "heads", "mlp"])
@pytest.mark.parametrize("metric", ["logit-diff", "logprob"])
def test_the_estimate_approaches_the_exact_patch_as_the_prompts_difference_shrinks(what, metric):
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    metric = METRICS[metric]
    errors = []
    for delta in (0.01, 0.001):
        model = _shrunk_model(delta, clean, corrupted)
        grid = estimate_grid_of(model, clean, corrupted, what, metric, "denoise")
        exact = _exact_grid(model, clean, corrupted, what, metric, "denoise")
        effect = np.abs(exact - grid.corrupted).max()
        assert effect > 0
        errors.append(np.abs(grid.raw - exact).max() / effect)
    # A first-order estimate's error relative to the effect falls like delta: tenfold here.
    assert errors[1] < errors[0] / 4, errors
    assert errors[1] < 0.02, errors


def test_kl_near_the_clean_run_is_estimated_at_twice_the_exact_change():
    """KL(clean || run) is quadratic near the clean run, x'Fx / 2: its gradient at the corrupted
    run, F x, dotted with the patch that restores the clean run, -x, gives -x'Fx, twice the
    exact change. The documented limit of a first-order estimate of this metric."""
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    t = int((clean != corrupted).nonzero()[0])
    model = _shrunk_model(0.001, clean, corrupted)
    grid = estimate_grid_of(model, clean, corrupted, "resid", METRICS["kl"])
    exact = _exact_grid(model, clean, corrupted, "resid", METRICS["kl"], "denoise")
    assert abs(exact[0, t]) <= 1e-6  # the whole stream at the changed token restores the clean run
    ratio = (grid.raw[0, t] - grid.corrupted) / (exact[0, t] - grid.corrupted)
    assert ratio == pytest.approx(2.0, rel=0.05)


def test_a_masked_heads_estimate_is_zero_as_the_mask_applies_to_both_runs():
    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    mask = np.zeros((L, NH), dtype=bool)
    mask[1, 2] = True
    change = Intervention.make(TINY, mask)
    metric = METRICS["logit-diff"]
    grid = estimate_grid_of(model, clean, corrupted, "heads", metric, "denoise", change)
    assert grid.raw[1, 2] == np.float32(grid.corrupted)
    assert np.abs(grid.raw - grid.corrupted).max() > 0
    # Both runs' metrics are the masked ones.
    masked = [(name, hook) for name, hook in change.hooks()]
    assert grid.clean == pytest.approx(metric_of(model, clean, metric, masked), abs=1e-4)
    assert grid.corrupted == pytest.approx(metric_of(model, corrupted, metric, masked), abs=1e-4)


def test_kl_in_the_noising_direction_is_zero_everywhere_and_says_why():
    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    noise = estimate_grid_of(model, clean, corrupted, "resid", METRICS["kl"], "noise")
    denoise = estimate_grid_of(model, clean, corrupted, "resid", METRICS["kl"], "denoise")
    assert "zero everywhere" in noise.note and "zero everywhere" not in denoise.note
    assert noise.estimate and "estimate" in noise.note
    # The gradient at the minimum is zero up to the rounding of KL(p || p) in float32.
    assert np.abs(noise.raw).max() <= SAFETY * F32_EPS * 100
    assert np.abs(denoise.raw - denoise.corrupted).max() > 0.01


def test_positions_after_the_metrics_are_not_computed_and_change_nothing():
    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=7, vocab=TINY.vocab_size, changed=(1, 5))
    metric = PatchMetric.make("logit-diff", (11, 12), position=3)
    grid = estimate_grid_of(model, clean, corrupted, "resid", metric)
    assert grid.raw.shape == (L + 1, 7)
    assert np.all(grid.raw[:, 4:] == np.float32(grid.corrupted))
    whole = estimate_grid_of(model, clean[:4], corrupted[:4], "resid", metric)
    np.testing.assert_array_equal(whole.raw, grid.raw[:, :4])


def test_the_grid_labels_its_axes():
    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=5, vocab=TINY.vocab_size)
    grid = estimate_grid_of(model, clean, corrupted, "heads-by-pos", METRICS["logprob"])
    assert grid.raw.shape == (L * NH, 5) and grid.rows[NH + 2] == "1.2" and grid.cols == ("0", "1", "2", "3", "4")
    grid = estimate_grid_of(model, clean, corrupted, "resid", METRICS["logprob"])
    assert grid.rows[-1] == "final resid_post" and grid.row_axis == "layer" and grid.col_axis == "position"


def test_cancel_stops_before_the_next_layer():
    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=5, vocab=TINY.vocab_size)
    seen = []
    with pytest.raises(Cancelled):
        estimate_grid_of(model, clean, corrupted, "heads", METRICS["kl"], progress=lambda d, n: seen.append(d),
                         is_cancelled=lambda: len(seen) >= 2)
    assert seen[-1] < L + 2


def test_bad_input_is_one_line():
    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=5, vocab=TINY.vocab_size)
    with pytest.raises(ModelError, match="same number of tokens"):
        estimate_grid_of(model, clean, corrupted[:4], "resid", METRICS["kl"])
    with pytest.raises(ModelError, match="estimates"):
        estimate_grid_of(model, clean, corrupted, "pattern", METRICS["kl"])
    with pytest.raises(ModelError, match="direction"):
        estimate_grid_of(model, clean, corrupted, "resid", METRICS["kl"], "sideways")
    with pytest.raises(CaptureTooLargeError, match="tokens or fewer"):
        estimate_grid_of(model, clean, corrupted, "resid", METRICS["kl"], memory_budget=estimate_bytes(TINY, 3))


def test_the_memory_bound_grows_with_the_square_of_the_prompt_and_is_stated():
    one, two = estimate_bytes(TINY, 1000), estimate_bytes(TINY, 2000)
    assert 3 < two / one < 4  # the attention of one layer dominates
    fits = max_estimate_tokens(TINY, estimate_bytes(TINY, 40))
    assert fits == 40


# -- on a session: the runs come from its cached patch sources ----------------------------------
@pytest.mark.parametrize("what, direction", [("resid", "denoise"), ("heads-by-pos", "noise"), ("mlp", "denoise")])
def test_the_sessions_estimate_equals_the_one_from_its_own_runs(what, direction):
    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size, changed=(1, 4))
    session = pair_session(model, clean, corrupted)
    metric = METRICS["logprob"]
    grid = estimate_grid(session, what, metric, direction)
    alone = estimate_grid_of(model, clean, corrupted, what, metric, direction)
    assert_float32_close(grid.raw, alone.raw, reduction=model_reduction(TINY), depth=L + 1,
                         scale=max(1.0, largest_logit(model, corrupted)))
    assert grid.cols[1] == "1 t1" and grid.estimate and grid.rows == alone.rows


@pytest.mark.parametrize("what", ["resid", "heads", "attn"])
def test_the_estimate_approaches_the_exact_grid_as_the_prompts_difference_shrinks(what):
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    metric = METRICS["logit-diff"]
    errors = []
    for delta in (0.01, 0.001):
        session = pair_session(_shrunk_model(delta, clean, corrupted), clean, corrupted)
        estimate, exact = estimate_grid(session, what, metric), patch_grid(session, what, metric)
        assert estimate.rows == exact.rows and estimate.cols == exact.cols
        errors.append(np.abs(estimate.raw - exact.raw).max() / np.abs(exact.raw - exact.corrupted).max())
    assert errors[1] < errors[0] / 4 and errors[1] < 0.02, errors


def test_the_session_refuses_prompts_of_different_lengths_in_one_line():
    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    session = pair_session(model, clean, corrupted[:5])
    with pytest.raises(ModelError, match=r"differ in length \(6 and 5 tokens\)") as caught:
        estimate_grid(session, "heads", METRICS["kl"])
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_family_switchs_head_estimates_are_the_metrics_derivatives(name):
    """Grouped and multi-query heads, windows and soft-caps, sandwich and post norms, parallel
    blocks, QK-norms, rotary variants: the backward through each block is autograd's own, so the
    finite-difference check holds on every switch."""
    model = randomize_(switch_model(name), seed=2).double()
    assert (model.config.n_layer, model.config.n_head) == (L, NH)
    clean, corrupted = prompt_pair(T=6, vocab=model.config.vocab_size, changed=(1, 4))
    metric = METRICS["logprob"]
    grid = estimate_grid_of(model, clean, corrupted, "heads", metric)
    source_acts = cache_of(model, clean, [f"blocks.{layer}.attn.hook_z" for layer in range(L)])
    eps = 0.02

    def slope(name, index, h):
        up = metric_of(model, corrupted, metric, [(name, blending(source_acts[name], h, index))])
        down = metric_of(model, corrupted, metric, [(name, blending(source_acts[name], -h, index))])
        return (up - down) / (2 * h)

    atol = SAFETY * F32_EPS * max(1.0, largest_logit(model, corrupted)) * (3 / eps + 2)
    worst = max(abs(float(grid.raw[row, col]) - grid.corrupted - (4 * slope(n, i, eps / 2) - slope(n, i, eps)) / 3)
                for row, col, n, i in cells("heads", 6))
    assert worst <= atol, f"{name}: off the derivative by {worst:.3g} (bound {atol:.3g})"
    assert np.abs(grid.raw - grid.corrupted).max() > 20 * atol


@pytest.mark.parametrize("what", ["resid", "heads", "attn"])
def test_under_feature_clamps_the_estimate_approaches_the_exact_grid(tmp_path, what):
    """The gradient goes through the clamps' hooks: with a positional clamp and an all-positions
    one, the estimate converges to the exact grid under the same clamps as the prompts'
    difference shrinks, and the clamps move both."""
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    metric = METRICS["logit-diff"]
    errors = []
    for delta in (0.01, 0.001):
        session = pair_session(_shrunk_model(delta, clean, corrupted), clean, corrupted)
        resid, _ = attach_random_sae(session, tmp_path / str(delta), "blocks.1.hook_resid_pre", seed=1)
        attn, _ = attach_random_sae(session, tmp_path / str(delta), "blocks.0.hook_attn_out", seed=2)
        change = Intervention.make(TINY, clamps=(FeatureClamp(resid, 5, "set", 4.0, 3),
                                                 FeatureClamp(attn, 7, "scale", 3.0), FeatureClamp(attn, 2, "set", 0.0)))
        estimate, exact = estimate_grid(session, what, metric, intervention=change), patch_grid(session, what, metric,
                                                                                              intervention=change)
        errors.append(np.abs(estimate.raw - exact.raw).max() / np.abs(exact.raw - exact.corrupted).max())
        plain = estimate_grid(session, what, metric)
        assert np.abs(estimate.raw - plain.raw).max() > 1e-4 * np.abs(plain.raw - plain.corrupted).max()
    assert errors[1] < errors[0] / 4 and errors[1] < 0.02, errors


def test_without_a_session_feature_clamps_are_refused_in_one_line():
    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    change = Intervention.make(TINY, clamps=(FeatureClamp(0, 1, "set", 0.0),))
    with pytest.raises(ModelError, match="applied by the session that holds their SAEs") as caught:
        estimate_grid_of(model, clean, corrupted, "heads", METRICS["kl"], intervention=change)
    assert "\n" not in str(caught.value)


def test_an_sae_loaded_and_attached_in_inference_mode_still_takes_the_gradient(tmp_path):
    """The command line loads SAEs inside torch.inference_mode; a TopK SAE's encoder then enters
    the backward whole. The attached SAE holds ordinary tensors, so the estimate is the one of an
    SAE attached outside it."""
    from transformer_viewer.model.sae.loading import load_sae

    model = tiny_gpt(TINY)
    clean, corrupted = prompt_pair(T=6, vocab=TINY.vocab_size)
    folder = write_saelens(tmp_path / "topk", saelens_cfg("topk", TINY.n_embd, 48, "blocks.1.hook_resid_pre", k=8),
                           random_weights("topk", TINY.n_embd, 48, seed=5))
    grids = []
    for mode in (True, False):
        session = pair_session(model, clean, corrupted)
        with torch.inference_mode(mode):
            index = session.attach_sae(load_sae(folder, TINY))
        assert not any(p.is_inference() for p in session.saes[index].module.parameters())
        change = Intervention.make(TINY, clamps=(FeatureClamp(index, 3, "scale", 4.0),))
        grids.append(estimate_grid(session, "attn", METRICS["logit-diff"], intervention=change).raw)
    np.testing.assert_array_equal(grids[0], grids[1])
