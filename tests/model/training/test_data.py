"""Compressed training data: an .xz is decoded a chunk at a time with a cap on the text it
yields; every stream of a concatenated file is read, as `xz -d` reads it."""

from __future__ import annotations

import lzma

import pytest

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.training.data import decompress_xz, read_text

TEXT = "The cat sat on the mat. Naïve café. ".encode() * 300


def test_concatenated_and_padded_streams_give_all_their_text(tmp_path):
    # Zero padding between streams (a multiple of four bytes) is part of the .xz format.
    joined = lzma.compress(TEXT) + b"\x00" * 4 + lzma.compress(TEXT.upper()) + lzma.compress(b"end")
    assert decompress_xz(joined, "x.xz") == TEXT + TEXT.upper() + b"end"
    path = tmp_path / "data.xz"
    path.write_bytes(joined)
    text, _digest = read_text(str(path))
    assert text == (TEXT + TEXT.upper() + b"end").decode("utf-8")


def test_the_cap_is_on_the_text_out_not_the_bytes_in():
    data = lzma.compress(TEXT)
    assert decompress_xz(data, "x.xz", cap=len(TEXT)) == TEXT  # exactly the cap: accepted
    with pytest.raises(ModelError, match="more than training data may be"):
        decompress_xz(data, "x.xz", cap=len(TEXT) - 1)
    # The cap holds across streams too: two streams, each under it, over it together.
    with pytest.raises(ModelError, match="more than training data may be"):
        decompress_xz(data + data, "x.xz", cap=len(TEXT) + 10)
