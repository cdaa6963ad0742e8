"""`transformer-viewer patch --sae ... --clamp ...`: the clamps apply to both runs and every
patched run, the JSON lists them and its values equal the library's under the same clamps (and
differ from the unclamped ones), and a saved session brings its SAEs and clamps as typed ones."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.models import scaled_init_loaded
from tests.helpers.patch_references import CLEAN, CORRUPTED
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from transformer_viewer.model.analysis.patching.attribution_patching import estimate_grid
from transformer_viewer.model.analysis.patching.exact import patch_grid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from transformer_viewer.model.sae.loading import load_sae
from transformer_viewer.model.sessions import registry
from transformer_viewer.model.sessions.checkpoint_part import record_of
from transformer_viewer.model.sessions.fingerprint import sae_fingerprint
from transformer_viewer.model.sessions.patching_part import PatchingRecord
from transformer_viewer.model.sessions.prompt_part import InterventionRecord, PromptRecord
from transformer_viewer.model.sessions.saes_part import SaeRecord, SaesRecord

PAIR = ("--clean", CLEAN, "--corrupted", CORRUPTED)
HOOK = "blocks.1.hook_resid_pre"
D_SAE = 48
TOKENS = ("--tokens", " Mary", " John")
MARY, JOHN = 5335, 1757
CLAMP_ARGS = ("--clamp", "0:5x3", "--clamp", "0:9=2.5@-3")  # -3: position 11 of the clean prompt's 14
CLAMPS = (FeatureClamp(0, 5, "scale", 3.0), FeatureClamp(0, 9, "set", 2.5, 11))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("patch-clamps")
    ckpt = str(folder / "tiny.safetensors")
    save_checkpoint(scaled_init_loaded().model, ckpt)
    weights = random_weights("standard", 32, D_SAE, seed=4)
    weights["W_enc"] *= 4.0  # several features fire at each token
    return ckpt, write_saelens(folder / "sae", saelens_cfg("standard", 32, D_SAE, HOOK), weights)


def _session(sae_folder):
    s = Session(scaled_init_loaded())
    s.set_prompt(CLEAN)
    s.set_corrupted(CORRUPTED)
    s.attach_sae(load_sae(sae_folder, s.config))
    return s


def _json(capsys, *argv):
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err
    return json.loads(out)


def _raw(data):
    return np.array([[c["raw"] for c in data["cells"] if c["r"] == r] for r in range(len(data["rows"]))])


@pytest.mark.parametrize("what, estimate", [("resid", False), ("heads", False), ("attn", True)])
def test_json_under_clamps_equals_the_library_and_differs_from_the_plain_grid(files, capsys, what, estimate):
    ckpt, sae = files
    flags = ("--estimate",) if estimate else ()
    data = _json(capsys, "patch", ckpt, *PAIR, "--what", what, *TOKENS, "--mask", "1.0", "--sae", sae, *CLAMP_ARGS,
                 *flags, "--json")
    plain = _json(capsys, "patch", ckpt, *PAIR, "--what", what, *TOKENS, "--mask", "1.0", *flags, "--json")
    s = _session(sae)
    assert len(s.tokens.ids) == 14
    mask = np.zeros((s.config.n_layer, s.config.n_head), dtype=bool)
    mask[1, 0] = True
    change = Intervention.make(s.config, mask, clamps=CLAMPS)
    grid = (estimate_grid if estimate else patch_grid)(s, what, PatchMetric.make("logit-diff", (MARY, JOHN)),
                                                       intervention=change)
    assert data["clamps"] == ["0:5x3", "0:9=2.5@11"] and plain["clamps"] == []
    assert data["intervention"] == change.describe()
    np.testing.assert_allclose(_raw(data), grid.raw, atol=1e-5)
    assert data["clean_metric"] == pytest.approx(grid.clean, abs=1e-5)
    assert np.abs(_raw(data) - _raw(plain)).max() > 1e-3 and data["clean_metric"] != plain["clean_metric"]


def test_a_saved_session_brings_its_saes_and_clamps(files, tmp_path, capsys):
    ckpt, sae = files
    clamps = (FeatureClamp(0, 5, "scale", 3.0), FeatureClamp(0, 9, "set", 2.5, 11))
    records = {"checkpoint": record_of(load_checkpoint(ckpt)), "prompt": PromptRecord(CLEAN),
               "intervention": InterventionRecord(2, 4, ((1, 0),), "zero", clamps),
               "patching": PatchingRecord(True, CORRUPTED),
               "saes": SaesRecord((SaeRecord(0, sae, HOOK, 32, D_SAE, sae_fingerprint(sae)),), 0, 5, False, 7)}
    path = registry.save(str(tmp_path / "s.tvsession"), records)
    saved = _json(capsys, "patch", "--session", path, "--what", "heads", *TOKENS, "--json")
    typed = _json(capsys, "patch", ckpt, *PAIR, "--what", "heads", *TOKENS, "--mask", "1.0", "--sae", sae,
                  *CLAMP_ARGS, "--json")
    assert saved["clamps"] == typed["clamps"] == ["0:5x3", "0:9=2.5@11"]
    assert saved["cells"] == typed["cells"] and saved["intervention"] == typed["intervention"]


def test_clamp_mistakes_are_one_line_before_the_model_loads(files, capsys):
    ckpt, sae = files
    assert "names SAE 1, but 1 --sae given" in error_line(*cli(capsys, "patch", ckpt, *PAIR, "--sae", sae,
                                                              "--clamp", "1:5=0"))
    assert "--clamp 'x=1': write" in error_line(*cli(capsys, "patch", ckpt, *PAIR, "--sae", sae, "--clamp", "x=1"))
    assert "outside the prompt's 14 tokens" in error_line(*cli(capsys, "patch", ckpt, *PAIR, "--sae", sae,
                                                               "--clamp", "0:5=0@20"))


def test_the_estimate_under_a_topk_saes_clamp_runs_and_equals_the_library(files, tmp_path, capsys):
    """The command loads SAEs inside torch.inference_mode; a TopK SAE's whole encoder enters the
    estimate's backward, and still the estimate runs."""
    ckpt, _ = files
    topk = write_saelens(tmp_path / "topk", saelens_cfg("topk", 32, D_SAE, HOOK, k=8),
                         random_weights("topk", 32, D_SAE, seed=6))
    data = _json(capsys, "patch", ckpt, *PAIR, "--what", "attn", *TOKENS, "--sae", topk, "--clamp", "3x4",
                 "--estimate", "--json")
    s = _session(topk)
    grid = estimate_grid(s, "attn", PatchMetric.make("logit-diff", (MARY, JOHN)),
                         intervention=Intervention.make(s.config, clamps=(FeatureClamp(0, 3, "scale", 4.0),)))
    np.testing.assert_allclose(_raw(data), grid.raw, atol=1e-5)
