"""A prompt past one encode call's budget, encoded in pieces: the same ids as one call where the
pre-tokenizer splits before words, the same text where tokens may span words, and the token
count checked as the pieces come."""

from __future__ import annotations

import pytest

from tests.helpers import tokenizers as tc
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.tokenizers import tokenizer_pieces
from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer
from transformer_viewer.model.tokenizers.tokenizer_pieces import cut_before_word

LONG = " ".join(tc.CORPUS[:6]) * 6 + "\n\nand a last line with   spaces  "


@pytest.mark.parametrize("kind", ["byte_level", "llama3_style"])
def test_a_prompt_past_one_calls_budget_gives_the_same_ids_in_pieces(tmp_path, monkeypatch, kind):
    """Where the pre-tokenizer splits before a word, pieces cut there tokenize exactly as one call."""
    tok = load_tokenizer(getattr(tc, kind)(str(tmp_path / kind)))
    whole, whole_ids = tok.tokenize_last(LONG, 40), tok.encode(LONG)
    monkeypatch.setattr(tokenizer_pieces, "CALL_BUDGET", int(100 * tok.growth))  # pieces of ~100 characters
    assert len(LONG) > 10 * 100
    assert tok.tokenize_last(LONG, 40) == whole
    assert tok.encode(LONG) == whole_ids


@pytest.mark.parametrize("kind", ["metaspace", "gemma_style"])
def test_pieces_of_a_tokenizer_whose_tokens_span_words_still_spell_the_prompt(tmp_path, monkeypatch, kind):
    """Without a split at spaces, merges may span a cut: the ids there may differ, the text may not."""
    tok = load_tokenizer(getattr(tc, kind)(str(tmp_path / kind)))
    whole = tok.encode(LONG, add_special_tokens=False)
    monkeypatch.setattr(tokenizer_pieces, "CALL_BUDGET", int(100 * tok.growth))
    pieces = tok.encode(LONG, add_special_tokens=False)
    assert tok.decode(pieces) == tok.decode(whole)
    last = tok.tokenize_last(LONG, 40)[0]
    assert last.text == LONG[len(LONG) - len(last.text):] and last.spans[-1][1] == len(last.text)


def test_the_token_count_is_checked_as_the_pieces_come(tmp_path, monkeypatch):
    tok = load_tokenizer(tc.byte_level(str(tmp_path / "bl")))
    monkeypatch.setattr(tokenizer_pieces, "CALL_BUDGET", int(50 * tok.growth))
    monkeypatch.setattr(tokenizer_pieces, "MAX_PROMPT_TOKENS", 300)
    with pytest.raises(ModelError, match="more than 300 tokens"):
        tok.encode("the cat sat on the mat " * 200)


def test_a_cut_falls_before_a_word_else_after_a_line_break_else_at_the_limit():
    assert cut_before_word("one two three four", 0, 12) == 7  # the piece is "one two", the next " three four"
    assert cut_before_word("one two  three\nfour", 0, 12) == 12  # a run of spaces is not cut
    assert cut_before_word("abcdefgh\nijklmnop", 0, 12) == 9
    assert cut_before_word("abcdefghijklmnop", 0, 12) == 12
    assert cut_before_word("ab cdefghijklmnop", 0, 12) == 12  # only the second half is searched
    assert cut_before_word("one two", 0, 100) == 7
