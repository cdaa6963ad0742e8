"""The GPT-2 tokenizer through tiktoken, built offline from the ranks file that ships in assets/.

Nothing is ever downloaded: tiktoken is handed the ranks directly, and the file's sha256 is
checked so a damaged install fails loudly instead of tokenizing wrongly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import tiktoken
import tiktoken.load

GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = "<|endoftext|>"
ENDOFTEXT_ID = 50256
GPT2_VOCAB = 50257

_VISIBLE = {" ": "·", "\n": "⏎", "\t": "⇥", "\r": "␍"}


def ranks_path() -> str:
    return str(resources.files("transformer_viewer.assets").joinpath("gpt2.tiktoken"))


@functools.lru_cache(maxsize=1)
def gpt2_encoding() -> tiktoken.Encoding:
    ranks = tiktoken.load.load_tiktoken_bpe(ranks_path(), expected_hash=GPT2_RANKS_SHA256)
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={ENDOFTEXT: ENDOFTEXT_ID},
        explicit_n_vocab=GPT2_VOCAB,
    )


def visible_label(piece: bytes) -> str:
    """A token's bytes as text a person can see: whitespace made visible, partial UTF-8 as \\xNN."""
    out = []
    i = 0
    while i < len(piece):
        # Decode the longest valid UTF-8 run starting here; stray bytes become \xNN.
        for j in range(min(len(piece), i + 4), i, -1):
            try:
                ch = piece[i:j].decode("utf-8")
            except UnicodeDecodeError:
                continue
            out.append("".join(_VISIBLE.get(c, c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}") for c in ch))
            i = j
            break
        else:
            out.append(f"\\x{piece[i]:02x}")
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class Tokenized:
    ids: tuple[int, ...]
    labels: tuple[str, ...]  # visible label per token
    spans: tuple[tuple[int, int], ...]  # character span [start, end) of each token in the text
    text: str


class Tokenizer:
    """GPT-2 BPE with display labels and character spans."""

    name = "gpt2"

    def __init__(self):
        self.enc = gpt2_encoding()
        self.n_vocab = self.enc.n_vocab

    def encode(self, text: str) -> list[int]:
        # `<|endoftext|>` typed by the user is the special token, not five ordinary pieces.
        return self.enc.encode(text, allowed_special={ENDOFTEXT})

    def decode(self, ids) -> str:
        return self.enc.decode(list(ids), errors="replace")

    def token_bytes(self, i: int) -> bytes:
        return self.enc.decode_single_token_bytes(int(i))

    def label(self, i: int) -> str:
        return visible_label(self.token_bytes(i))

    def tokenize(self, text: str) -> Tokenized:
        ids = self.encode(text)
        labels = tuple(self.label(i) for i in ids)
        return Tokenized(tuple(ids), labels, tuple(self.spans(ids, text)), text)

    def tokenize_last(self, text: str, n: int) -> tuple[Tokenized, int]:
        """The last `n` tokens of `text` (their text and spans start where they do) and how many
        tokens were dropped before them. Same result as slicing `tokenize(text)`, but labels and
        spans are made for the kept tokens only: a 1 MB paste costs its encoding, not seconds
        of per-token Python."""
        ids = self.encode(text)
        dropped = max(0, len(ids) - n)
        if not dropped:
            return Tokenized(tuple(ids), tuple(self.label(i) for i in ids), tuple(self.spans(ids, text)), text), 0
        kept = ids[dropped:]
        head = self.enc.decode_bytes(ids[:dropped])
        complete = _complete_prefix(head)
        start = min(len(complete.decode("utf-8", errors="replace")), len(text))
        tail = text[start:]
        spans = self.spans(kept, tail, pending=head[len(complete):])
        return Tokenized(tuple(kept), tuple(self.label(i) for i in kept), tuple(spans), tail), dropped

    def spans(self, ids, text: str, pending: bytes = b"") -> list[tuple[int, int]]:
        """Character span of each token. A token that ends mid-character gets the characters it
        completes; one holding only part of a character gets an empty span. `pending`: bytes of
        a character begun by tokens before `ids` (see tokenize_last)."""
        spans = []
        done = 0
        for i in ids:
            pending += self.token_bytes(i)
            complete = _complete_prefix(pending)
            start = done
            done = min(done + len(complete.decode("utf-8", errors="replace")), len(text))
            pending = pending[len(complete):]
            spans.append((start, done))
        return spans


def _complete_prefix(b: bytes) -> bytes:
    """The longest prefix of b that does not end inside a UTF-8 sequence."""
    for cut in range(0, min(4, len(b) + 1)):
        head = b[: len(b) - cut]
        try:
            head.decode("utf-8")
            return head
        except UnicodeDecodeError:
            continue
    return b  # not UTF-8 at all: count it as it decodes with replacement
