"""The offline GPT-2 tokenizer: known ids, the special token, visible labels, character spans."""

from __future__ import annotations

import hashlib

import pytest

from transformer_viewer.model.tokenizers.tokenizer import (
    ENDOFTEXT_ID,
    GPT2_RANKS_SHA256,
    Tokenizer,
    ranks_path,
    visible_label,
)


@pytest.fixture(scope="module")
def tok():
    return Tokenizer()


@pytest.mark.parametrize("text,ids", [
    ("Hello world", [15496, 995]),
    (" the", [262]),
    ("\n", [198]),
    ("GPT-2", [38, 11571, 12, 17]),
    ("I'm", [40, 1101]),
])
def test_known_gpt2_ids(tok, text, ids):
    assert tok.encode(text) == ids
    assert tok.decode(ids) == text


def test_vocabulary_size_and_ranks_file(tok):
    assert tok.n_vocab == 50257
    with open(ranks_path(), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == GPT2_RANKS_SHA256


def test_endoftext_typed_in_a_prompt_is_the_special_token(tok):
    assert tok.encode("<|endoftext|>") == [ENDOFTEXT_ID] == [50256]
    t = tok.tokenize("a<|endoftext|>b")
    assert t.ids == (64, 50256, 65)
    assert t.labels[1] == "<|endoftext|>"
    assert t.spans == ((0, 1), (1, 14), (14, 15))


def test_labels_make_whitespace_visible(tok):
    t = tok.tokenize(" x\n\ty")
    assert t.labels == ("·x", "⏎", "⇥", "y")
    assert tok.tokenize("Hello world").labels == ("Hello", "·world")
    assert tok.tokenize("  two").labels == ("·", "·two")


def test_partial_utf8_bytes_are_shown_as_hex(tok):
    t = tok.tokenize("🤗 hi")  # the emoji's four bytes split over three tokens
    assert t.labels[:3] == ("\\xf0\\x9f", "\\xa4", "\\x97")
    assert t.labels[3] == "·hi"
    assert visible_label("é".encode()) == "é"
    assert visible_label(b"\xe2\x80") == "\\xe2\\x80"


def test_spans_cover_the_text(tok):
    text = "Hello world, naïve café 🤗!\nnext line"
    t = tok.tokenize(text)
    assert t.spans[0][0] == 0 and t.spans[-1][1] == len(text)
    for (a, b), (c, _d) in zip(t.spans, t.spans[1:], strict=False):
        assert a <= b == c  # contiguous, in order
    # Joining each span's characters gives the text back.
    assert "".join(text[a:b] for a, b in t.spans) == text


def test_spans_of_a_split_character(tok):
    t = tok.tokenize("🤗 hi")
    assert t.spans == ((0, 0), (0, 0), (0, 1), (1, 4))  # the emoji belongs to the token that completes it


def test_empty_prompt(tok):
    t = tok.tokenize("")
    assert t.ids == () and t.labels == () and t.spans == ()
