"""A figure manifest's SAEs: written and read back as they were, with the clamps that name them;
`private` keeps only the file names of their local paths; a hostile SAE field is refused."""

from __future__ import annotations

import json

import pytest

from transformer_viewer.model.capture.interventions import FeatureClamp
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sessions.figure_manifest import ExportRecord, manifest_text, read_manifest
from transformer_viewer.model.sessions.fingerprint import HF_CACHE, SAMPLED, Fingerprint
from transformer_viewer.model.sessions.prompt_part import InterventionRecord, PromptRecord
from transformer_viewer.model.sessions.saes_part import SaeRecord, SaesRecord

LOCAL = SaeRecord(0, "/home/someone/saes/layer0-resid", "blocks.0.hook_resid_post", 32, 48,
                  Fingerprint(SAMPLED, "ab" * 32, 2), labels="/home/someone/saes/labels.csv")
CACHED = SaeRecord(1, "org/saes/layer1", "blocks.1.hook_resid_post", 32, 64, Fingerprint(HF_CACHE, "cd" * 32, 2))
BUNDLED = SaeRecord(2, None, "blocks.1.hook_resid_pre", 32, 16, Fingerprint(SAMPLED, "ef" * 32, 1))


def _records() -> dict:
    clamps = (FeatureClamp(0, 5, "scale", 3.0), FeatureClamp(1, 9, "set", 2.5, 4))
    return {"prompt": PromptRecord("The cat sat"), "intervention": InterventionRecord(2, 4, (), "zero", clamps),
            "saes": SaesRecord((LOCAL, CACHED, BUNDLED)), "export": ExportRecord("attention", ".npy")}


def _read(tmp_path, text: str) -> dict:
    path = tmp_path / "f.npy.manifest.json"
    path.write_text(text)
    records, notes = read_manifest(str(path))
    assert notes == []
    return records


def test_the_saes_and_their_clamps_come_back_as_written(tmp_path):
    records = _read(tmp_path, manifest_text(_records()))
    assert records["saes"] == _records()["saes"]
    assert records["intervention"].clamps == _records()["intervention"].clamps


def test_a_private_manifest_keeps_only_the_file_names_of_local_sae_paths(tmp_path):
    text = manifest_text(_records(), private=True)
    assert "/home/someone" not in text and "The cat sat" not in text
    saes = _read(tmp_path, text)["saes"].saes
    assert [s.spec for s in saes] == ["layer0-resid", "org/saes/layer1", None]  # a cache's repo is no local path
    assert saes[0].labels == "labels.csv" and saes[0].fingerprint == LOCAL.fingerprint


@pytest.mark.parametrize("field,value,expect", [
    ("d_sae", 10 ** 12, "saes.saes[0].d_sae: is"),
    ("hook", "h" * 5000, "characters long"),
    ("spec", 7, "saes.saes[0].spec: is a number, not text"),
    ("fingerprint", {"method": "guess"}, "fingerprint.method: is 'guess'"),
    ("index", 1, "which another SAE of the session has"),
])
def test_a_hostile_sae_field_is_refused_in_one_line(tmp_path, field, value, expect):
    doc = json.loads(manifest_text(_records()))
    doc["parts"]["saes"]["saes"][0][field] = value
    with pytest.raises(ModelError) as raised:
        _read(tmp_path, json.dumps(doc))
    message = str(raised.value)
    assert expect in message and "\n" not in message
