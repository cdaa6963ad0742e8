"""A checkpoint's fingerprint: the same bytes anywhere give the same one, a changed byte in a
sampled place another; a cached model's comes from the cache's blob names, reading nothing."""

from __future__ import annotations

import os
import shutil

import numpy as np

from transformer_viewer.model.sessions import fingerprint as fp


def _file(path, size=3 << 20, seed=0):
    path.write_bytes(np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes())
    return str(path)


def test_a_copy_has_the_same_fingerprint_and_a_changed_byte_another(tmp_path):
    a = _file(tmp_path / "a.safetensors")
    copy = tmp_path / "elsewhere" / "a.safetensors"
    copy.parent.mkdir()
    shutil.copy(a, copy)
    os.utime(copy, (1, 1))  # another modification time: still the same weights
    first = fp.checkpoint_fingerprint(a)
    assert first.method == fp.SAMPLED and first.files == 1
    assert fp.checkpoint_fingerprint(str(copy)) == first
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 1  # the middle MiB is sampled
    copy.write_bytes(bytes(data))
    assert fp.checkpoint_fingerprint(str(copy)).digest != first.digest
    copy.write_bytes(bytes(data) + b"\0")  # another size
    assert fp.checkpoint_fingerprint(str(copy)).digest != first.digest


def test_a_folder_covers_its_weight_files_and_config(tmp_path):
    _file(tmp_path / "model.safetensors", 1000)
    (tmp_path / "config.json").write_text('{"n_layer": 2}')
    (tmp_path / "README.md").write_text("not a weight")
    first = fp.checkpoint_fingerprint(str(tmp_path))
    assert first.files == 2
    (tmp_path / "README.md").write_text("changed, but no weight")
    assert fp.checkpoint_fingerprint(str(tmp_path)) == first
    (tmp_path / "config.json").write_text('{"n_layer": 3}')
    assert fp.checkpoint_fingerprint(str(tmp_path)).digest != first.digest


def test_a_cached_model_is_fingerprinted_by_its_blob_names(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    repo = hub / "models--org--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / ("0" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    for name, blob in (("config.json", "a" * 64), ("model.safetensors", "b" * 64)):
        (blobs / blob).write_bytes(b"{}")
        os.symlink(os.path.relpath(blobs / blob, snap), snap / name)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(fp, "_sampled", lambda _p: (_ for _ in ()).throw(AssertionError("a blob was read")))
    first = fp.checkpoint_fingerprint("org/tiny")
    assert first.method == fp.HF_CACHE and first.files == 2
    (blobs / ("c" * 64)).write_bytes(b"{}")
    os.unlink(snap / "model.safetensors")
    os.symlink(os.path.relpath(blobs / ("c" * 64), snap), snap / "model.safetensors")  # another revision's weights
    assert fp.checkpoint_fingerprint("org/tiny").digest != first.digest


def test_the_tokenizer_fingerprint_follows_its_files(tmp_path):
    assert fp.tokenizer_fingerprint("gpt2") == "builtin:gpt2"
    (tmp_path / "tokenizer.json").write_text('{"model": {}}')
    first = fp.tokenizer_fingerprint(str(tmp_path))
    (tmp_path / "tokenizer_config.json").write_text('{"add_bos_token": true}')
    assert fp.tokenizer_fingerprint(str(tmp_path)) != first
