"""The "Diff vs clean" toggle of the residual, MLP and logit-lens views under a feature clamp
alone (no head masked): usable, and what it shows is the clamped run minus the clean run as
the session API computes them; with neither a mask nor a clamp it is off and unusable."""

from __future__ import annotations

import numpy as np

from tests.helpers.sae_window import D_SAE, opened, reference
from tests.helpers.tolerances import assert_float32_close, assert_probs_close, largest_logit, model_reduction
from tests.helpers.window import TINY, analysis_views, wait_idle
from transformer_viewer.model.analysis.diff import lens_diff
from transformer_viewer.model.analysis.lens import logit_lens
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.capture.on_demand import mlp_activations
from transformer_viewer.model.decoder.config import GPTConfig

CLAMP = FeatureClamp(0, 5, "set", 40.0)  # the SAE reads blocks.0.hook_resid_post: layer 1 on changes
REDUCTION = max(model_reduction(GPTConfig(**TINY)), D_SAE)
DEPTH = TINY["n_layer"] + 1


def _close_diff(actual, expected, scale: float, what: str) -> None:
    """A difference of two runs against the reference's: each run's float32 error is relative
    to the runs' own magnitude `scale` (the difference may be far smaller than either), and
    the two errors add."""
    assert_float32_close(actual, expected, reduction=REDUCTION, depth=DEPTH, scale=2 * max(1.0, scale), what=what)


def _largest(*arrays) -> float:
    return max(float(np.abs(x).max()) for x in arrays)


def test_a_clamp_alone_diffs_every_view_against_the_clean_run(qtbot, window, tiny_ckpt, sae_folder):
    w, st = window, window.state
    a = analysis_views(w)
    toggles = (a.residual.diff, a.mlp.diff, a.lens.diff)
    assert all(not t.isEnabled() and not t.active for t in toggles)  # nothing masked or clamped
    opened(qtbot, w, sae_folder)
    assert all(not t.isEnabled() for t in toggles)  # an SAE open changes no run
    st.set_clamps((CLAMP,))
    wait_idle(qtbot, w, lambda: st.trace.intervention.clamps == (CLAMP,))
    trace, clean = st.trace, st.clean_trace
    assert not st.is_masked and clean is not trace and clean.intervention.is_empty  # the baseline kept
    assert w.logits.table.horizontalHeaderItem(3).text() == "clamped"  # the next-token panel names the run
    assert "KL(baseline \u2016 clamped)" in w.logits.summary.text()
    for t in toggles:
        assert t.isEnabled()
        t.setChecked(True)
        assert t.active

    ref = reference(tiny_ckpt, sae_folder)
    change = Intervention.make(ref.config, clamps=(CLAMP,))
    ref_run, ref_clean = ref.run(change), ref.run(None)

    w.show_view("residual")
    qtbot.waitUntil(a.residual.isVisible)
    shown = a.residual.matrix()
    np.testing.assert_array_equal(shown, trace.resid_norms - clean.resid_norms)
    _close_diff(shown, ref_run.resid_norms - ref_clean.resid_norms,
                _largest(ref_run.resid_norms, ref_clean.resid_norms), "residual diff")
    before = [i for i, name in enumerate(trace.resid_labels) if name in ("embed", "0.pre", "0.mid")]
    assert before and not np.any(shown[before])  # the SAE sits after layer 0: nothing changes before it
    assert np.abs(shown).max() > 1e-2
    assert "clamped − clean" in a.residual.norms.title()

    st.set_selection(layer=1)  # the MLP view shows the selected layer's neurons
    w.show_view("mlp")
    wait_idle(qtbot, w, lambda: all(st.layer_activations(t, 1) is not None for t in (trace, clean)))
    acts, clean_acts = (st.layer_activations(t, 1).astype(np.float32) for t in (trace, clean))
    np.testing.assert_array_equal(a.mlp.matrix(), (acts - clean_acts).T[a.mlp.order()])
    ref_acts, ref_clean_acts = mlp_activations(ref, ref_run, 1), mlp_activations(ref, ref_clean, 1)
    _close_diff(acts - clean_acts, ref_acts - ref_clean_acts, _largest(ref_acts, ref_clean_acts), "MLP diff")
    assert np.abs(acts - clean_acts).max() > 1e-3
    assert "clamped − clean" in a.mlp.heatmap.title()

    w.show_view("logit-lens")
    wait_idle(qtbot, w, lambda: a.lens._current() is not None and a.lens._current().intervention == st.intervention)
    r = a.lens._current()
    np.testing.assert_array_equal(a.lens.matrix(), r.diff)
    clean_lens = logit_lens(ref, ref.masked_residuals())
    run_lens = logit_lens(ref, ref.masked_residuals(change), reference_ids=clean_lens.top_ids)
    # The tiny model's probabilities are near 1 / vocabulary: each run's is compared relative to
    # itself, and the difference is theirs exactly.
    assert np.array_equal(r.clean.top_ids, clean_lens.top_ids)
    logits = largest_logit(ref.model, trace.token_ids)
    assert_probs_close(r.lens.reference_probs, run_lens.reference_probs, logit_scale=logits,
                       reduction=REDUCTION, depth=DEPTH, what="clamped lens")
    assert_probs_close(r.clean.top_probs, clean_lens.top_probs, logit_scale=logits,
                       reduction=REDUCTION, depth=DEPTH, what="clean lens")
    np.testing.assert_array_equal(r.diff, lens_diff(r.clean, r.lens))
    assert not np.any(r.diff[0]) and np.abs(r.diff / r.clean.top_probs).max() > 1e-2  # from the SAE's layer on
    assert "clamped − clean" in a.lens.heatmap.title()

    st.set_clamps(())  # no clamp, no mask: the toggles are off and the views show the clean run
    wait_idle(qtbot, w, lambda: st.trace is st.clean_trace)
    assert all(not t.isEnabled() and not t.active for t in toggles)
    w.show_view("residual")
    np.testing.assert_array_equal(a.residual.matrix(), st.trace.resid_norms)
