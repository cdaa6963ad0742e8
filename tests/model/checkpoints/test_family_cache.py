"""Every supported family opens from a folder and from the Hugging Face cache by name, offline:
a tiny random model of each (the parity tests' configs) with a tokenizer of its style, saved into
a cache laid out as huggingface_hub lays one out (blobs/, snapshots/<commit>/ of links, refs/main),
loaded as `org/name` through `load_checkpoint`, `transformer-viewer info` and `predict`, gives Hugging Face's
logits and names its family."""

from __future__ import annotations

import json
import os

import pytest
import torch

from tests.helpers.hf_family_models import FAMILY_OF, WITH_GPT2, save_with_tokenizer, vocab
from tests.helpers.hf_hub import cache_entry
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.viewer.cli.main import main

NAMES = WITH_GPT2


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """name -> (the model folder, the HF model), each family's folder with its own tokenizer.json."""
    root = tmp_path_factory.mktemp("families")
    out = {}
    for name in NAMES:
        folder = str(root / name)
        out[name] = folder, save_with_tokenizer(name, folder)
    return out


def _logits_match(loaded, hf) -> None:
    ids = torch.randint(3, vocab(hf), (1, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (loaded.model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_a_family_opens_from_its_folder_and_by_name(published, name, tmp_path, monkeypatch, capsys):
    folder, hf = published[name]
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the real ~/.cache must not answer
    # Half the families are found through HF_HOME/hub, half through HF_HUB_CACHE.
    if NAMES.index(name) % 2:
        hub = tmp_path / "hf_home" / "hub"
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    else:
        hub = tmp_path / "hub"
        monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    repo = f"tiny-org/{name}-tiny"
    snapshot = cache_entry(hub, repo, folder)
    assert all(os.path.islink(os.path.join(snapshot, f)) for f in os.listdir(snapshot))
    family = FAMILY_OF[hf.config.architectures[0]]

    for source in (folder, repo):
        loaded = load_checkpoint(source, device="cpu")
        assert loaded.format == "huggingface" and loaded.training["family"] == family
        assert loaded.tokenizer.spec == (folder if source == folder else snapshot)
        _logits_match(loaded, hf)
        capsys.readouterr()
        assert main(["info", source, "--json"]) == 0
        facts = json.loads(capsys.readouterr().out)
        assert facts["family"] == family and facts["name"] == (repo if source == repo else name)
        assert facts["tokenizer"].startswith("tokenizer.json")
    assert loaded.name == repo and loaded.source == repo
    assert main(["predict", "--checkpoint", repo, "--prompt", "the quick brown", "--device", "cpu"]) == 0
    assert capsys.readouterr().err == ""
