"""The unmapped safetensors reader: the same tensors and metadata as the safetensors library, one
line (never a SIGBUS) for a file that shrinks while it is read, and a header whose entries are
checked against each other and the file."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.helpers.hardening import one_line, save_tiny
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.checkpoints.formats import safetensors_file
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.viewer.cli.main import main


def every_dtype() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(3, 5, generator=g) * 4
    out = {f"{dt}".removeprefix("torch."): base.to(dt) for dt in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
        torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)}
    for dt in (torch.uint16, torch.uint32, torch.uint64):
        out[f"{dt}".removeprefix("torch.")] = torch.randint(0, 1000, (4, 2), generator=g).to(dt)
    out["scalar"] = torch.tensor(2.5)
    out["empty"] = torch.zeros(0, 7)
    out["wide"] = torch.randn(2, 3, 4, 5, generator=g)
    return out


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal, dtype and shape included (float8 has no equality of its own)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def test_the_same_tensors_and_metadata_as_the_safetensors_library(tmp_path):
    path = str(tmp_path / "all.safetensors")
    save_file(every_dtype(), path, metadata={"format": "pt", "note": "ü"})
    meta, got = safetensors_file.read_file(path)
    want = load_file(path)
    assert meta == {"format": "pt", "note": "ü"}
    assert set(got) == set(want)
    for name in want:
        assert same(got[name], want[name]), name
        assert got[name].untyped_storage().nbytes() == got[name].nbytes  # its own memory, no larger buffer


def test_skipped_prefixes_are_not_read(tmp_path):
    path = str(tmp_path / "s.safetensors")
    save_file({"model.vision.w": torch.ones(3), "model.text.w": torch.ones(2)}, path)
    assert list(safetensors_file.read_tensors(path, skip=("model.vision.",))) == ["model.text.w"]


def test_a_checkpoint_truncated_while_it_is_read_is_one_line(tmp_path, monkeypatch, capsys):
    """The file is cut to half between its header and its tensors, as another program rewriting
    it would: a mapped read would die of SIGBUS here; this one says what happened."""
    path = str(tmp_path / "shrinking.safetensors")
    save_tiny(path)
    size = os.path.getsize(path)
    real, cut = safetensors_file.read_tensor, []

    def truncate_once(p, f, entry):
        if not cut:
            cut.append(size // 2)
            os.truncate(path, cut[0])
        return real(p, f, entry)

    monkeypatch.setattr(safetensors_file, "read_tensor", truncate_once)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert "the file ended early" in str(e.value) and "changed while it was read" in str(e.value)
    assert one_line(str(e.value))

    cut.clear()
    save_tiny(path)
    assert main(["info", "--checkpoint", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "the file ended early" in err


def test_a_tensor_cut_short_says_where(tmp_path):
    path = str(tmp_path / "short.safetensors")
    save_file({"w": torch.arange(64, dtype=torch.float32)}, path)
    data = open(path, "rb").read()
    header_end = 8 + struct.unpack("<Q", data[:8])[0]
    with open(path, "rb") as f:
        header = safetensors_file.read_header(path, f)
    os.truncate(path, header_end + 100)  # after the header was read: 100 of the 256 bytes remain
    with open(path, "rb", buffering=0) as f, pytest.raises(CheckpointError, match="ended early") as e:
        safetensors_file.read_tensor(path, f, header.entries["w"])
    assert f"at byte {header_end + 100:,} of the {header_end + 256:,}" in str(e.value)


@pytest.mark.parametrize("entries, expect", [
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, "truncated safetensors file: "),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F16", "shape": [2], "data_offsets": [6, 10]}}, "'a' and 'b' overlap"),
    ({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, "needs 12 bytes, its data_offsets span 8"),
    ({"w": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, "not a list of at most 16 sizes"),
    ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}, "not [begin, end]"),
    ({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}}, "dtype 'Q4', which is none of the format's"),
])
def test_header_entries_are_checked_against_each_other_and_the_file(tmp_path, entries, expect):
    text = json.dumps(entries).encode()
    path = str(tmp_path / "h.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"\0" * 10)
    with pytest.raises(CheckpointError) as e:
        safetensors_file.read_tensors(path)
    assert expect in str(e.value) and one_line(str(e.value))


def test_the_big_endian_swap_reverses_each_element():
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3) * 1000 + 7
    swapped = safetensors_file._swapped(t)
    assert np.array_equal(swapped.numpy(), t.numpy().byteswap())
    assert torch.equal(safetensors_file._swapped(swapped), t)
