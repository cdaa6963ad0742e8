"""The .tvsession file: every part's every field survives a round trip, arrays come back bit for
bit, and every hostile archive is refused in one line before anything is extracted."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from tests.helpers.sessions import full_records, hostile_sessions, manifest_doc, zip_of
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sessions import container, registry
from transformer_viewer.model.sessions.prompt_part import PromptRecord

HOSTILE = hostile_sessions()


def test_every_field_of_every_part_round_trips(tmp_path):
    records = full_records()
    assert set(records) == set(registry.PARTS), "a part without a full record in tests/helpers/sessions.py"
    path = registry.save(str(tmp_path / "s.tvsession"), records)
    back, arrays, notes = registry.load(path)
    assert notes == [] and arrays == {}
    for name, record in records.items():
        assert back[name] == record, name


def test_arrays_come_back_bit_for_bit(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"probs": rng.random((3, 7), dtype=np.float32), "ids": np.arange(5, dtype=np.int64),
              "mask": rng.random((2, 4)) > 0.5}
    path = registry.save(str(tmp_path / "s.tvsession"), {"prompt": PromptRecord("x")}, arrays)
    _records, back, _notes = registry.load(path)
    assert set(back) == set(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].tobytes() == array.tobytes()
    assert registry.saved_size({"prompt": PromptRecord("x")}, arrays) == len(open(path, "rb").read())


def test_a_session_at_2048_tokens_stays_under_a_megabyte(tmp_path):
    rng = np.random.default_rng(1)
    words = rng.choice(["the", "cat", "sat", "on", "a", "mat", "and", "then", "slept"], size=2048)
    records = full_records()
    records["prompt"] = PromptRecord(" ".join(words))
    path = registry.save(str(tmp_path / "long.tvsession"), records)
    size = len(open(path, "rb").read())
    assert size <= 1 << 20, size


def test_unknown_fields_parts_and_newer_parts_are_noted_not_fatal(tmp_path):
    parts = registry.encode({"prompt": PromptRecord("kept")})
    parts["prompt"]["colour"] = "blue"
    parts["from-the-future"] = {"version": 1}
    parts["selection"] = {"version": 99, "layer": 1}
    path = tmp_path / "s.tvsession"
    path.write_bytes(zip_of([("manifest.json", manifest_doc(parts, "1.7"))]))
    records, _arrays, notes = registry.load(str(path))
    assert records == {"prompt": PromptRecord("kept")}
    text = "\n".join(notes)
    assert "'colour'" in text and "'from-the-future'" in text and "'selection' of version 99" in text


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_sessions_are_refused_in_one_line(tmp_path, name):
    data, expect = HOSTILE[name]
    path = tmp_path / f"{name}.tvsession"
    path.write_bytes(data)
    with pytest.raises(ModelError) as e:
        registry.load(str(path))
    message = str(e.value)
    assert "\n" not in message and expect in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing extracted anywhere


def test_the_bomb_is_refused_from_the_directory_before_inflating(tmp_path, monkeypatch):
    path = tmp_path / "bomb.tvsession"
    path.write_bytes(HOSTILE["zip-bomb"][0])
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *a, **k: pytest.fail("a member was opened"))
    with pytest.raises(ModelError, match="zip bomb"):
        container.read_session(str(path))


def test_a_folder_or_missing_file_is_one_line(tmp_path):
    for path, expect in ((tmp_path, "a folder, not a regular file; open a .tvsession file"), (tmp_path / "none.tvsession", "cannot be read")):
        with pytest.raises(ModelError, match=expect):
            registry.load(str(path))


def test_writing_over_a_session_is_whole_or_nothing(tmp_path, monkeypatch):
    path = tmp_path / "s.tvsession"
    registry.save(str(path), {"prompt": PromptRecord("first")})
    before = path.read_bytes()

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.write", full)
    with pytest.raises(OSError):
        registry.save(str(path), {"prompt": PromptRecord("second")})
    assert path.read_bytes() == before
    assert json.loads(zipfile.ZipFile(path).read("manifest.json"))["parts"]["prompt"]["text"] == "first"
