"""A prompt through the tokenizers library in pieces, so that no one call can take more memory than
a budget allows: the library normalizes a whole text in one call that Python can neither budget
nor cancel.

A prompt whose length times its tokenizer's growth bound (`tokenizer_growth`) fits CALL_BUDGET
is one call, as before; a longer one is cut before a word into pieces that each fit, encoded one
after the other, its token count checked after each piece against MAX_PROMPT_TOKENS, and only ids
and offsets kept between pieces (the library's Encoding holds ~300 bytes a token).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from transformer_viewer.model.errors import ModelError

# Characters one encode call may make of a prompt (its length times the tokenizer's growth bound):
# the library keeps ~300 bytes per token and ~50 per normalized character, so a call stays near
# 300 MB at worst.
CALL_BUDGET = 1 << 20
MAX_PROMPT_TOKENS = 4_000_000  # tokens a prompt may make (kept as 24 bytes each across pieces)


@dataclass(frozen=True)
class Encoded:
    """A prompt's ids and, on demand, the character offsets of its tokens from index `first` on."""

    ids: list[int]
    offsets_from: Callable[[int], list[tuple[int, int]]]


def encode_in_pieces(encode, text: str, growth: float, guard) -> Encoded:
    """`text` through `encode` (piece -> the library's Encoding) in one call when `growth` lets it
    fit CALL_BUDGET, else in pieces that each do. `guard()` is the context every call into the
    library runs in (it turns a panic or a library error into one line)."""
    per_call = max(1, int(CALL_BUDGET // growth))
    if len(text) <= per_call:
        with guard():
            enc = encode(text)
            ids = enc.ids

        def offsets_from(first: int) -> list[tuple[int, int]]:
            with guard():
                if first == 0:
                    return enc.offsets
                return [enc.token_to_chars(i) or (0, 0) for i in range(first, len(ids))]

        return Encoded(ids, offsets_from)
    ids, offsets, total, start = [], [], 0, 0
    while start < len(text):
        end = cut_before_word(text, start, start + per_call)
        with guard():
            enc = encode(text[start:end])
            piece_ids, piece_offsets = enc.ids, enc.offsets
        del enc
        total += len(piece_ids)
        if total > MAX_PROMPT_TOKENS:
            raise ModelError(f"the prompt makes more than {MAX_PROMPT_TOKENS:,} tokens with this tokenizer; "
                             "paste a shorter passage (the model sees only its last context-length tokens)")
        ids.append(np.asarray(piece_ids, dtype=np.int64))
        offsets.append(np.asarray(piece_offsets, dtype=np.int64).reshape(-1, 2) + start)  # (tokens, 2)
        start = end
    all_offsets = np.concatenate(offsets)  # (tokens, 2)

    def piece_offsets_from(first: int) -> list[tuple[int, int]]:
        return [tuple(o) for o in all_offsets[first:].tolist()]

    return Encoded(np.concatenate(ids).tolist(), piece_offsets_from)


def cut_before_word(text: str, start: int, stop: int) -> int:
    """Where a piece of `text` from `start` ends, at most at `stop`: before a space that starts a word
    (after a non-space, before a non-space); else after a line break; else at `stop`. Only the
    second half of the range is searched. Where the pre-tokenizer splits before words (byte-level
    BPE, Metaspace that splits, Whitespace) the pieces' ids are those of one call; a tokenizer whose
    tokens may span words (SentencePiece-style, unsplit) may tokenize the words at a cut
    differently, spelling the same text."""
    if stop >= len(text):
        return len(text)
    low = start + (stop - start) // 2
    at = stop
    while (at := text.rfind(" ", low + 1, at)) > low:
        if not text[at - 1].isspace() and not text[at + 1].isspace():
            return at
    newline = text.rfind("\n", low, stop)
    return newline + 1 if newline >= low else stop
