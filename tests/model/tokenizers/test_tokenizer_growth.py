"""The growth bound of a tokenizer's specs against what the tokenizers library really makes of
texts, and the Precompiled charsmap check against the library's own reading of the charsmaps."""

from __future__ import annotations

import json

import pytest
from tokenizers import Regex, normalizers, pre_tokenizers

from tests.helpers.charsmaps import charsmap
from transformer_viewer.model.tokenizers.charsmap import CharsmapError, check_charsmap
from transformer_viewer.model.tokenizers.tokenizer_growth import (
    MAX_GROWTH,
    UNICODE_GROWTH,
    GrowthError,
    check_precompiled,
    decoder_growth,
    normalizer_growth,
    pre_tokenizer_growth,
)

# Texts that make each step grow as much as it can: one character, the characters a step targets,
# and the Unicode characters with the longest decompositions (U+FDFA: 18 under NFKC; U+1F82: 4
# under NFD; U+0130 İ: 2 when lowercased).
PROBES = ["a", "aaaa", "abc", "z", " a  b ", "\ufdfa", "\u1f82", "\u0130", "x\u0344y", "a\tb\nc", "日本"]


def spec(normalizer) -> dict:
    return json.loads(normalizer.__getstate__())


NORMALIZERS = {
    "doubling chain": normalizers.Sequence([normalizers.Replace("a", "aa")] * 5),
    "literal shrink": normalizers.Replace("aaaa", "b"),
    "empty literal": normalizers.Replace("", "xy"),
    "empty-matching regex": normalizers.Replace(Regex("z*"), "xy"),
    "one-character regex": normalizers.Replace(Regex("."), "xyz"),
    "prepend": normalizers.Prepend("▁▁"),
    "nfkc": normalizers.NFKC(),
    "nfkd": normalizers.NFKD(),
    "nfd": normalizers.NFD(),
    "nfc": normalizers.NFC(),
    "lowercase": normalizers.Lowercase(),
    "byte level": normalizers.ByteLevel(),
    "bert": normalizers.BertNormalizer(),
    "charsmap": normalizers.Precompiled(charsmap({ord("a"): "abcde", ord("z"): ""})),
    "t5-like sequence": normalizers.Sequence([normalizers.Precompiled(charsmap({ord("a"): "aaa"})),
                                              normalizers.Replace(Regex(" {2,}"), " "), normalizers.Prepend("▁")]),
}


@pytest.mark.parametrize("name", NORMALIZERS)
def test_the_bound_covers_what_the_library_makes_of_every_probe(name):
    normalizer = NORMALIZERS[name]
    bound = normalizer_growth(spec(normalizer))
    for text in PROBES:
        out = normalizer.normalize_str(text)
        assert len(out) <= bound * len(text), (name, text, out, bound)


def test_the_doubling_chain_reaches_its_bound_exactly():
    normalizer = NORMALIZERS["doubling chain"]
    assert normalizer_growth(spec(normalizer)) == 32
    assert len(normalizer.normalize_str("a")) == 32


def test_nfkc_makes_eighteen_characters_of_one():
    assert len(normalizers.NFKC().normalize_str("\ufdfa")) == UNICODE_GROWTH["NFKC"] == 18


def test_a_charsmap_grows_by_its_longest_replacement():
    data = charsmap({ord("a"): "abcde", ord("b"): "xy"})
    assert check_charsmap(data) == 5
    assert normalizers.Precompiled(data).normalize_str("ab") == "abcdexy"


def test_pre_tokenizer_and_decoder_growth():
    assert pre_tokenizer_growth(spec(pre_tokenizers.ByteLevel())) == 4
    sequence = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Digits()])
    assert pre_tokenizer_growth(spec(sequence)) == 2
    assert pre_tokenizer_growth(None) == 1
    doubling = {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}
    assert decoder_growth({"type": "Sequence", "decoders": [doubling] * 11}) == 2048 > MAX_GROWTH


BROKEN = {
    "header only": (b"\x01\x00", "shorter than its own 4-byte header"),
    "trie cut short": (charsmap({97: "b"}, trie_size=1 << 20), "claims a trie"),
    "empty trie": (b"\x00\x00\x00\x00abc\x00", "empty trie"),
    "strings not UTF-8": (charsmap({97: "b"}) + b"\xff\x00", "not UTF-8"),
    "unit past the end": (charsmap({97: "b"}, root_offset=2048), "past the trie's end"),
    "leaf past the strings": (charsmap({97: "b"}, values={97: 999}), "past its replacement strings"),
    "leaf inside a character": (charsmap({97: "é"}, values={97: 1}), "inside a character"),
    "key ending inside a character": (charsmap({0xC3: "x"}), "inside a character"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_a_charsmap_the_library_would_panic_on_is_refused(name):
    data, says = BROKEN[name]
    with pytest.raises(CharsmapError, match=says):
        check_charsmap(data)


def test_the_walk_follows_every_path_a_text_can_take():
    """The unit past the end is reached only through the byte 'a': the walk must go there."""
    data = bytearray(charsmap({97: "b", 98: "c"}))
    child_of_a = 4 + 4 * (256 ^ 97)
    unit = int.from_bytes(data[child_of_a:child_of_a + 4], "little")
    data[child_of_a:child_of_a + 4] = ((unit & 0x3FF) | (4096 << 10)).to_bytes(4, "little")  # offset 4096
    with pytest.raises(CharsmapError, match="past the trie's end"):
        check_charsmap(bytes(data))


def test_check_precompiled_finds_a_charsmap_at_any_depth():
    bad = {"type": "Precompiled", "precompiled_charsmap": "AQA="}
    with pytest.raises(GrowthError, match="4-byte header"):
        check_precompiled({"type": "Sequence", "normalizers": [{"type": "NFC"}, bad]})
    with pytest.raises(GrowthError, match="not base64"):
        check_precompiled({"type": "Precompiled", "precompiled_charsmap": "%%"})
    check_precompiled({"type": "Sequence", "normalizers": [{"type": "NFC"}]})  # nothing to check


def test_each_part_is_bounded_in_steps(tmp_path):
    from transformer_viewer.model.errors import CheckpointError
    from transformer_viewer.model.tokenizers.tokenizer_growth import MAX_STEPS, check_growth, steps_of

    strip = {"type": "Strip", "strip_left": True, "strip_right": True}
    nested = {"type": "Sequence", "normalizers": [strip, {"type": "Sequence", "normalizers": [strip] * 3}]}
    assert steps_of(nested) == 4 and steps_of(None) == 0 and steps_of(strip) == 1
    many = {"type": "Sequence", "normalizers": [strip] * (MAX_STEPS + 1)}
    assert check_growth("t.json", {"normalizer": nested, "pre_tokenizer": None, "decoder": None}) == 1
    with pytest.raises(CheckpointError, match=f"its normalizer has {MAX_STEPS + 1} steps"):
        check_growth("t.json", {"normalizer": many, "pre_tokenizer": None, "decoder": None})
