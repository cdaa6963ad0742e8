"""How much a tokenizer.json can grow a text before its model splits it into tokens, bounded from
its specs alone, before any text meets it.

The library runs a normalizer over the whole text in one call that Python can neither budget nor
cancel, so a chain of steps that each double the text (24 `Replace "a" -> "aa"` make one `a`
sixteen million) would take gigabytes on a short prompt. The bound is the product of each step's
growth of one character:

- a literal `Replace` of s by c: len(c)/len(s), at least 1; an empty s inserts c before and
  after every character (1 + 2 len(c) for a one-character text); a regex `Replace`: 1 + 3 len(c),
  since a regex may match the empty string before a character and the character itself, and the
  empty string at the end;
- `Prepend` p: 1 + len(p) (the text's first character carries it);
- `Precompiled` (SentencePiece's charsmap): its longest replacement (`charsmap`);
- the Unicode forms: NFKC and NFKD up to 18 characters from one (U+FDFA), NFD 4, NFC 3; a
  lowercase up to 3; a byte-level map up to 4 (one character per UTF-8 byte); BERT's normalizer
  spaces out CJK characters (3), lowercases and strips accents through NFD;
- the pre-tokenizer's ByteLevel (4) and Metaspace (2: a `▁` before a word).

Real tokenizers stay at a few hundred at most (T5's: its charsmap's 18, times 4 for the regex
Replace that squeezes runs of spaces, times 2 for Metaspace: 144); a tokenizer whose bound passes
MAX_GROWTH is refused at load.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math

from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.tokenizers.charsmap import CharsmapError, check_charsmap

FIX = "restore the model's own tokenizer.json"
MAX_GROWTH = 1024  # real tokenizers' bound is a few hundred at most
MAX_STEPS = 64  # steps in a normalizer, pre-tokenizer or decoder; real ones have one to five
UNICODE_GROWTH = {"NFC": 3, "NFD": 4, "NFKC": 18, "NFKD": 18, "Lowercase": 3, "ByteLevel": 4}
PRE_TOKENIZER_GROWTH = {"ByteLevel": 4, "Metaspace": 2}
BERT_CJK_GROWTH = 3  # a space on each side


class GrowthError(ValueError):
    """A spec the library would panic on (a bad Precompiled charsmap), in a few words."""


def normalizer_growth(node) -> float:
    """The most characters one character of a text can become through a normalizer spec."""
    if not isinstance(node, dict):
        return 1.0
    kind = node.get("type")
    if kind == "Sequence":
        return math.prod(normalizer_growth(n) for n in node.get("normalizers") or [])
    if kind == "Replace":
        content = node.get("content")
        c = len(content) if isinstance(content, str) else 0
        pattern = node.get("pattern")
        literal = pattern.get("String") if isinstance(pattern, dict) else None
        if isinstance(literal, str):
            return max(1.0, c / len(literal)) if literal else 1.0 + 2 * c
        return 1.0 + 3 * c
    if kind == "Prepend":
        prefix = node.get("prepend")
        return 1.0 + (len(prefix) if isinstance(prefix, str) else 0)
    if kind == "Precompiled":
        return float(precompiled_growth(node))
    if kind == "BertNormalizer":
        growth = BERT_CJK_GROWTH if node.get("handle_chinese_chars", True) else 1
        if node.get("lowercase", True):
            growth *= UNICODE_GROWTH["Lowercase"]
        if node.get("strip_accents") or (node.get("strip_accents") is None and node.get("lowercase", True)):
            growth *= UNICODE_GROWTH["NFD"]
        return float(growth)
    return float(UNICODE_GROWTH.get(kind, 1))


def pre_tokenizer_growth(node) -> float:
    """The most characters one character can become through a pre-tokenizer spec."""
    if isinstance(node, dict):
        if node.get("type") == "Sequence":
            return math.prod(pre_tokenizer_growth(n) for n in node.get("pretokenizers") or [])
        return float(PRE_TOKENIZER_GROWTH.get(node.get("type"), 1))
    return 1.0


def decoder_growth(node) -> float:
    """The most characters one character of a token's text can become through a decoder spec (its
    Replace steps; the others join, strip or map bytes back, which shrinks the text)."""
    if isinstance(node, dict):
        if node.get("type") == "Sequence":
            return math.prod(decoder_growth(n) for n in node.get("decoders") or [])
        if node.get("type") == "Replace":
            return normalizer_growth(node)
    return 1.0


def precompiled_growth(node: dict) -> int:
    """The longest replacement of a Precompiled spec's charsmap; GrowthError where the library
    would panic (its charsmap missing, not base64, or malformed)."""
    raw = node.get("precompiled_charsmap")
    if not isinstance(raw, str):
        raise GrowthError(f"its Precompiled normalizer has a precompiled_charsmap of {type(raw).__name__}, "
                          "not a base64 string")
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise GrowthError("its Precompiled normalizer's precompiled_charsmap is not base64") from None
    return _charsmap_growth(data)


@functools.lru_cache(maxsize=4)  # checked before the library loads it, and again on its spec
def _charsmap_growth(data: bytes) -> int:
    try:
        return check_charsmap(data)
    except CharsmapError as e:
        raise GrowthError(f"its Precompiled normalizer's charsmap {e}") from None


def check_precompiled(node) -> None:
    """Every Precompiled spec in a normalizer spec (any depth), checked: GrowthError for the first
    the library would panic on."""
    if isinstance(node, dict):
        if node.get("type") == "Precompiled":
            precompiled_growth(node)
        for v in node.values():
            check_precompiled(v)
    elif isinstance(node, list):
        for v in node:
            check_precompiled(v)


def check_before_reading(path: str, text: str) -> None:
    """Refuse, before the library reads `text`, a Precompiled normalizer it would panic on (Rust
    prints a panic to stderr before Python can catch it). Only a file that may hold one is parsed
    here: one naming "Precompiled", or one with \\u escapes, which could spell the name."""
    if "Precompiled" not in text and "\\u" not in text:
        return
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return  # the library says what is wrong with it
    try:
        check_precompiled(doc.get("normalizer") if isinstance(doc, dict) else None)
    except GrowthError as e:
        raise CheckpointError(f"{path}: {e}; {FIX}") from None


def steps_of(node) -> int:
    """The steps of a normalizer, pre-tokenizer or decoder spec: its parts, Sequences unfolded."""
    if isinstance(node, dict):
        inner = [v for k, v in node.items() if k in ("normalizers", "pretokenizers", "decoders") and isinstance(v, list)]
        return sum(steps_of(n) for part in inner for n in part) if inner else 1
    return 0


def check_growth(path: str, spec: dict) -> float:
    """The bound on how many characters one character of a prompt can become before the model
    splits it (normalizer, then pre-tokenizer), refused above MAX_GROWTH, as is a decoder that can
    grow a token's text that much, or a part of more than MAX_STEPS steps (each passes over the
    whole text: thousands that each grow nothing would still take minutes on a long prompt)."""
    for part in ("normalizer", "pre_tokenizer", "decoder"):
        if (n := steps_of(spec[part])) > MAX_STEPS:
            raise CheckpointError(f"{path}: its {part.replace('_', '-')} has {n:,} steps, where a real tokenizer's has "
                                  f"a few (at most {MAX_STEPS}); {FIX}")
    try:
        growth = normalizer_growth(spec["normalizer"]) * pre_tokenizer_growth(spec["pre_tokenizer"])
        decoded = decoder_growth(spec["decoder"])
    except GrowthError as e:
        raise CheckpointError(f"{path}: {e}; {FIX}") from None
    for part, g in (("normalizer and pre-tokenizer", growth), ("decoder", decoded)):
        if g > MAX_GROWTH:
            shown = f"{g:,.0f}" if g < 1e15 else f"{g:.1e}" if math.isfinite(g) else "more than 1e308"
            raise CheckpointError(f"{path}: its {part} can make one character into up to {shown} (their steps' "
                                  f"growth multiplied), where a real tokenizer's make at most a few hundred "
                                  f"(at most {MAX_GROWTH:,}); {FIX}")
    return growth
