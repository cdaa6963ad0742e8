"""Calls into the Rust-backed tokenizers: a panic (a BaseException) or a library error is one line
and a tokenizer that panicked is dropped, while KeyboardInterrupt and SystemExit pass; bytes that
are not UTF-8 are read as U+FFFD by both tokenizers alike; ids and regex counts are read from
ASCII digits only."""

from __future__ import annotations

import pytest

from tests.helpers import tokenizers as tc
from tests.helpers.panics import a_panic
from transformer_viewer.model.errors import CheckpointError, ModelError
from transformer_viewer.model.rust_calls import is_panic, library_call
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer, parse_token, replace_undecodable
from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer
from transformer_viewer.model.tokenizers.tokenizer_spec import pattern_problem


def test_a_panic_becomes_one_line_of_the_asked_error_and_is_reported():
    seen = []
    with pytest.raises(CheckpointError) as info:
        with library_call("x.json: cannot read it", "restore x.json", CheckpointError, on_panic=seen.append):
            raise a_panic("index out of bounds: the len is 3\nstack backtrace: ...")
    message = str(info.value)
    assert message == "x.json: cannot read it (the library panicked: index out of bounds: the len is 3); restore x.json"
    assert seen == [message]


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), SystemExit(3)])
def test_what_stops_the_program_passes(stop):
    with pytest.raises(type(stop)):
        with library_call("x", "y", on_panic=lambda _m: pytest.fail("not a panic")):
            raise stop


def test_library_errors_are_wrapped_only_when_asked():
    with pytest.raises(ValueError):
        with library_call("x", "y"):
            raise ValueError("a bug of ours")
    with pytest.raises(ModelError, match=r"^x \(WordLevel error: Missing \[UNK\]\); y$"):
        with library_call("x", "y", library_errors=True):
            raise Exception("WordLevel error: Missing [UNK]\nmore")
    ours = ModelError("already one line")
    with pytest.raises(ModelError) as info:
        with library_call("x", "y", library_errors=True):
            raise ours
    assert info.value is ours


def test_a_panic_is_known_by_its_name():
    assert is_panic(a_panic()) and not is_panic(RuntimeError("x")) and not is_panic(KeyboardInterrupt())


class _Panicking:
    """Stands in for the library's tokenizer: every encode panics as the library does."""

    def encode(self, *_a, **_kw):
        raise a_panic("called `Option::unwrap()` on a `None` value")


def test_a_tokenizer_that_panicked_is_dropped(tmp_path):
    folder = tc.byte_level(str(tmp_path / "bl"))
    tok = load_tokenizer(folder)
    assert tok.encode("the cat")
    tok._tk = _Panicking()
    with pytest.raises(ModelError, match="the library panicked: called `Option::unwrap"):
        tok.encode("the cat")
    with pytest.raises(ModelError, match="panicked earlier and was dropped; open the model again"):
        tok.tokenize("the cat")
    again = load_tokenizer(folder)  # read anew from its files
    assert again is not tok and again.encode("the cat")


def test_bytes_that_are_not_utf8_read_as_replacement_by_both_tokenizers(tmp_path):
    undecodable = b"caf\xe9 au lait \xff".decode("utf-8", "surrogateescape")
    replaced = "caf\ufffd au lait \ufffd"
    assert replace_undecodable(undecodable) == replaced
    for tok in (Tokenizer(), load_tokenizer(tc.metaspace(str(tmp_path / "ms")))):
        assert tok.encode(undecodable) == tok.encode(replaced)
        assert tok.tokenize(undecodable).text == replaced


def test_ids_are_ascii_digits_only(tmp_path):
    tok = Tokenizer()
    assert parse_token("12", tok, 50257) == 12
    assert parse_token("²", tok, 50257) == tok.encode("²")[0]  # one GPT-2 token, read as text
    with pytest.raises(ModelError, match="not one"):
        parse_token("٣٣", tok, 50257)
    assert pattern_problem("a{²}") is None and pattern_problem("(a+){1,٣}") is None  # literal braces
    assert pattern_problem("(a+){2,}") is not None
