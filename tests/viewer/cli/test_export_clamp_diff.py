"""`export --diff --sae ... --clamp ...` on the residual, MLP and logit-lens views: with a feature
clamp and no masked head, the numbers written are the clamped run minus the clean run as the
session API computes them; with neither a mask nor a clamp, `--diff` is one line saying to
mask a head or clamp a feature, and nothing is written."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_float32_close, float32_atol, largest_logit, model_reduction
from tests.helpers.window import PROMPT, TINY, make_checkpoint
from transformer_viewer.model.analysis.lens import logit_lens
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.capture.on_demand import mlp_activations
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.sae.loading import load_sae

HOOK = "blocks.0.hook_resid_post"  # the clamp changes layer 1 on
D_SAE = 48
CLAMP = FeatureClamp(0, 5, "set", 40.0)
TYPED_CLAMP = ("--clamp", "5=40")
N_MLP = 4 * TINY["n_embd"]
DEPTH = TINY["n_layer"] + 1


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("clamp-diff") / "tiny.safetensors")


@pytest.fixture(scope="module")
def sae(tmp_path_factory):
    weights = random_weights("standard", TINY["n_embd"], D_SAE, seed=4)
    weights["W_enc"] *= 4.0  # several features fire at each token
    folder = tmp_path_factory.mktemp("clamp-diff-sae") / "sae"
    return write_saelens(folder, saelens_cfg("standard", TINY["n_embd"], D_SAE, HOOK), weights)


@pytest.fixture(scope="module")
def runs(ckpt, sae):
    """A plain session with the SAE attached, and its clamped and clean runs of the prompt."""
    session = Session(load_checkpoint(ckpt), keep_full=True)
    session.set_prompt(PROMPT)
    assert session.attach_sae(load_sae(sae, session.config)) == 0
    change = Intervention.make(session.config, None, clamps=(CLAMP,))
    return session, change, session.run(change), session.run(None)


def _export(capsys, ckpt, out, view: str, *extra) -> None:
    rc, _out, err = cli(capsys, "export", ckpt, "--prompt", PROMPT, "--view", view, "--layer", "1",
                        "--diff", "--out", str(out), *extra)
    assert rc == 0, err


def _reduction(session) -> int:
    return max(model_reduction(session.config), D_SAE)


def _close_diff(actual, expected, scale: float, session, what: str) -> None:
    """Each run's float32 error is relative to the runs' magnitude `scale`; the two add."""
    assert_float32_close(actual, expected, reduction=_reduction(session), depth=DEPTH, scale=2 * max(1.0, scale),
                         what=what)


def test_residual_and_mlp_diffs_under_a_clamp_are_the_runs_difference(ckpt, sae, runs, tmp_path, capsys):
    session, _change, run, clean = runs
    _export(capsys, ckpt, tmp_path / "residual.npy", "residual", "--sae", sae, *TYPED_CLAMP)
    got = np.load(tmp_path / "residual.npy")
    scale = max(np.abs(run.resid_norms).max(), np.abs(clean.resid_norms).max())
    _close_diff(got, run.resid_norms - clean.resid_norms, scale, session, "residual diff")
    assert np.abs(got).max() > 1e-2

    _export(capsys, ckpt, tmp_path / "mlp.npy", "mlp", "--sae", sae, *TYPED_CLAMP, "--sort", "index",
            "--rows", str(N_MLP))
    got = np.load(tmp_path / "mlp.npy")
    acts, clean_acts = mlp_activations(session, run, 1), mlp_activations(session, clean, 1)
    _close_diff(got, (acts - clean_acts).T, max(np.abs(acts).max(), np.abs(clean_acts).max()), session, "MLP diff")
    assert np.abs(got).max() > 1e-3


def test_the_lens_diff_under_a_clamp_is_the_runs_difference(ckpt, sae, runs, tmp_path, capsys):
    session, change, run, _clean = runs
    _export(capsys, ckpt, tmp_path / "lens.npy", "logit-lens", "--sae", sae, *TYPED_CLAMP)
    got = np.load(tmp_path / "lens.npy")
    clean_lens = logit_lens(session, session.masked_residuals())
    run_lens = logit_lens(session, session.masked_residuals(change), reference_ids=clean_lens.top_ids)
    p_run, p_clean = run_lens.reference_probs.astype(np.float64), clean_lens.top_probs.astype(np.float64)
    # Each probability moves relative to itself by twice its logits' float32 error (its logit's and
    # the normaliser's); the tiny model's are near 1 / vocabulary, so no absolute bound would test.
    rtol = float32_atol(_reduction(session), DEPTH, 2 * largest_logit(session.model, run.token_ids))
    assert got.shape == p_run.shape
    assert np.all(np.abs(got - (p_run - p_clean)) <= rtol * (p_run + p_clean))
    assert not np.any(got[0]) and np.abs(got / p_clean).max() > 1e-2  # the embedding row is before the SAE


@pytest.mark.parametrize("view", ["residual", "mlp", "logit-lens"])
def test_diff_with_neither_a_mask_nor_a_clamp_is_one_line(ckpt, sae, tmp_path, capsys, view):
    out = tmp_path / f"{view}.npy"
    rc, stdout, err = cli(capsys, "export", ckpt, "--prompt", PROMPT, "--view", view, "--diff", "--out", str(out))
    line = error_line(rc, stdout, err)
    assert "mask a head or clamp a feature" in line and "--clamp" in line
    # An SAE open without a clamp changes no run: refused alike (after the SAE's own note).
    rc, stdout, err = cli(capsys, "export", ckpt, "--prompt", PROMPT, "--view", view, "--diff", "--sae", sae,
                          "--out", str(out))
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert rc == 2 and "Traceback" not in err and errors == [line]
    assert not out.exists()
