"""A clean and a corrupted prompt with feature clamps of two random SAEs, and the same clamps
written by hand: what the tests of patching under clamps run and check against.

The clamps: SAE 0 at blocks.1.hook_resid_pre (edited at blocks.0.hook_resid_post), one feature
set at position 4 (before the prompts differ, so in the rows a patched run takes from the cache)
and one at position 11 (among the rows it computes); SAE 1 at blocks.0.hook_attn_out, one
feature scaled and one zeroed at every position."""

from __future__ import annotations

from tests.helpers.models import tiny_session
from tests.helpers.patch_references import CLEAN, CORRUPTED
from tests.helpers.saes import attach_random_sae, standard_clamp_hook
from transformer_viewer.model.capture.interventions import FeatureClamp


def clamped_session(folder, clean: str = CLEAN, corrupted: str = CORRUPTED):
    """(session with both prompts and both SAEs attached, its clamps, their hand-written hooks)."""
    s = tiny_session(clean)
    s.set_corrupted(corrupted)
    return (s, *attach_clamps(s, folder))


def attach_clamps(session, folder) -> tuple[tuple, list]:
    """Attach the two SAEs to `session`: (the clamps, their hand-written (name, hook) pairs)."""
    resid, w_resid = attach_random_sae(session, folder, "blocks.1.hook_resid_pre", seed=1)
    attn, w_attn = attach_random_sae(session, folder, "blocks.0.hook_attn_out", seed=2)
    at_resid = (FeatureClamp(resid, 5, "set", 4.0, 4), FeatureClamp(resid, 9, "set", 3.0, 11))
    at_attn = (FeatureClamp(attn, 7, "scale", 3.0), FeatureClamp(attn, 2, "set", 0.0))
    hand = [("blocks.0.hook_resid_post", standard_clamp_hook(w_resid, at_resid)),
            ("blocks.0.hook_attn_out", standard_clamp_hook(w_attn, at_attn))]
    return at_resid + at_attn, hand
