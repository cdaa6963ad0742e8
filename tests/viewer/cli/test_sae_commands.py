"""`features` and `predict --sae --clamp`: what they print and write equals the library's answer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.models import ANALYSIS_PROMPT as PROMPT
from tests.helpers.models import TINY, scaled_init_loaded
from tests.helpers.saes import random_weights, saelens_cfg, write_npz, write_saelens
from transformer_viewer.model.analysis.sae_features import token_features
from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.sae.loading import load_sae

HOOK = "blocks.0.hook_resid_post"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("sae_cli")
    ckpt = root / "tiny.safetensors"
    save_checkpoint(scaled_init_loaded().model, str(ckpt))
    sae0 = write_saelens(root / "sae0", saelens_cfg("standard", 32, 48, HOOK, model_from_pretrained_kwargs={}),
                         random_weights("standard", 32, 48, seed=1))
    sae1 = write_npz(root / "gemma" / "params.npz", random_weights("jumprelu", 32, 40, seed=2))
    return str(ckpt), sae0, f"{sae1}@blocks.1.hook_resid_pre"


def _session(files, *clamps):
    s = Session(scaled_init_loaded())
    s.set_prompt(PROMPT)
    for spec in files[1:]:
        s.attach_sae(load_sae(spec, TINY))
    return s, Intervention.make(TINY, clamps=tuple(clamps))


def test_features_json_is_the_librarys_top_features(files, capsys):
    ckpt, sae0, sae1 = files
    rc, out, err = cli(capsys, "features", ckpt, "--sae", sae0, "--sae", sae1, "--prompt", PROMPT, "--top", "4",
                       "--json")
    assert rc == 0, err
    data = json.loads(out)
    s, clean = _session(files)
    assert [t["id"] for t in data["tokens"]] == list(s.tokens.ids)
    assert data["features"] == data["saes"][0]["features"] and len(data["saes"]) == 2
    for index, each in enumerate(data["saes"]):
        want = token_features(s, index, top=4, intervention=clean)
        assert len(each["features"]) == len(s.tokens.ids)
        for lst, ids, acts in zip(each["features"], want.ids, want.acts, strict=True):
            assert [f["id"] for f in lst] == [int(i) for i in ids if i >= 0]
            np.testing.assert_array_equal([f["activation"] for f in lst], acts[ids >= 0])
            assert [f["activation"] for f in lst] == sorted((f["activation"] for f in lst), reverse=True)


@pytest.mark.parametrize("ext", ["csv", "npy"])
def test_features_out_files(files, capsys, tmp_path, ext):
    ckpt, sae0, _ = files
    path = tmp_path / f"f.{ext}"
    rc, _out, err = cli(capsys, "features", ckpt, "--sae", sae0, "--prompt", PROMPT, "--top", "3", "--clamp", "5=2",
                        "--out", str(path))
    assert rc == 0, err
    s, clamped = _session(files[:2], FeatureClamp(0, 5, "set", 2.0))
    want = token_features(s, 0, top=3, intervention=clamped)
    if ext == "npy":
        got = np.load(path, allow_pickle=False)
        assert got.shape == (1, len(s.tokens.ids), 3)
        np.testing.assert_array_equal(got["id"][0], want.ids)
        np.testing.assert_array_equal(got["activation"][0], want.acts)
    else:
        rows = path.read_text().splitlines()
        assert rows[0] == "sae,position,token,rank,feature,activation"
        assert len(rows) - 1 == int((want.ids >= 0).sum())


def test_predict_with_clamps_is_the_clamped_run(files, capsys):
    ckpt, sae0, sae1 = files
    rc, out, err = cli(capsys, "predict", ckpt, "--sae", sae0, "--sae", sae1, "--prompt", PROMPT, "--clamp", "7=6",
                       "--clamp", "1:3x0@-2", "--top-k", "5", "--json")
    assert rc == 0, err
    data = json.loads(out)
    s, _ = _session(files)
    T = len(s.tokens.ids)
    change = Intervention.make(TINY, clamps=(FeatureClamp(0, 7, "set", 6.0), FeatureClamp(1, 3, "scale", 0.0, T - 2)))
    nxt = s.run(change, top_k=5).next
    assert data["clamps"] == ["0:7=6", f"1:3x0@{T - 2}"]
    assert [t["id"] for t in data["top"]] == nxt.top_ids.tolist()
    np.testing.assert_array_equal([t["prob"] for t in data["top"]], nxt.top_probs)
    clean = s.run(None, top_k=5).next
    assert not np.array_equal(clean.top_probs, nxt.top_probs)


@pytest.mark.parametrize("argv, expect", [
    (["predict", "--clamp", "5=1"], "names SAE 0, but no --sae given"),
    (["predict", "--sae", "{sae0}", "--clamp", "5==1"], "write [SAE:]FEATURE=VALUE"),
    (["predict", "--sae", "{sae0}", "--clamp", "5=nan"], "write [SAE:]FEATURE=VALUE"),
    (["predict", "--sae", "{sae0}", "--clamp", "48=1"], "SAE 0 has features 0..47"),
    (["predict", "--sae", "{sae0}", "--clamp", "5=1@99"], "position 99 is outside the prompt's"),
    (["features", "--sae", "{sae0}@blocks.1.hook_mlp_out"], "reads blocks.0.hook_resid_post, not"),
    (["features", "--sae", "{npz}"], "say which hook point it reads"),
    (["features", "--sae", "{npz}@blocks.7.hook_resid_post"], "does not exist in this model"),
    (["features", "--sae", "{npz}@blocks.0.mlp.hook_post"], "the SAE reads 32-wide activations"),
    (["features", "--sae", "no/such/sae"], "no such file or folder"),
    (["features", "--sae", "{sae0}", "--top", "0"], "--top must be at least 1"),
    (["features", "--sae", "{sae0}", "--out", "x.json"], "written as .csv or .npy"),
])
def test_mistakes_are_one_line(files, capsys, argv, expect):
    ckpt, sae0, sae1 = files
    argv = [a.format(sae0=sae0, npz=sae1.split("@")[0]) for a in argv]
    line = error_line(*cli(capsys, argv[0], ckpt, "--prompt", PROMPT, *argv[1:]))
    assert expect in line
