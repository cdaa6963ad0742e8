"""An SAE for the window tests: a tiny random one in SAELens's format for the tiny model, opened
through the window, and the plain session the window's numbers are checked against."""

from __future__ import annotations

import pytest

from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_float32_close, model_reduction
from tests.helpers.window import TINY, reference_session, wait_idle

HOOK = "blocks.0.hook_resid_post"
D_SAE = 64


@pytest.fixture(scope="module")
def sae_folder(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("sae") / "tiny_sae"
    weights = random_weights("standard", TINY["n_embd"], D_SAE, seed=3)
    weights["W_enc"] *= 4.0  # most tokens fire several features
    return write_saelens(folder, saelens_cfg("standard", TINY["n_embd"], D_SAE, HOOK), weights)


def opened(qtbot, window, folder: str):
    """Open `folder` as an SAE through the window and wait for it to be attached."""
    n = len(window.state.saes.attached)
    assert window.sae_menu.open(folder) is not None
    wait_idle(qtbot, window, lambda: len(window.state.saes.attached) == n + 1 or window.last_error)
    assert window.last_error is None
    return window.state.saes.attached[-1]


def reference(ckpt: str, folder: str):
    """A plain session on the prompt with the same SAE attached (index 0)."""
    from transformer_viewer.model.sae.loading import load_sae

    session = reference_session(ckpt)
    assert session.attach_sae(load_sae(folder, session.config)) == 0
    return session


def close(actual, expected, what: str) -> None:
    """The window's worker (its weights packed for oneDNN's GEMM) against a plain session: the
    float32 rule through the tiny model's layers and the SAE."""
    from transformer_viewer.model.decoder.config import GPTConfig

    assert_float32_close(actual, expected, reduction=max(model_reduction(GPTConfig(**TINY)), D_SAE),
                         depth=TINY["n_layer"] + 1, what=what)
