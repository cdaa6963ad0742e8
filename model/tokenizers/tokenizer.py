"""Tokenizers: what every backend offers, and GPT-2's through tiktoken.

A model's tokenizer is found by its spec: "gpt2" (GPT-2's, built offline from the ranks file that
ships in assets/; the file's sha256 is checked so a damaged install fails loudly instead of
tokenizing wrongly) or a Hugging Face folder whose `tokenizer.json` the `tokenizers` library runs
(`hf_tokenizer.HFTokenizer`). Both offer the same interface, which the session, the CLI and the
views use: `encode`, `decode`, `tokenize` / `tokenize_last` (ids, visible labels, character spans,
special flags), `label`, `is_special`, `token_bytes`, `document_prefix`, `n_vocab`, `spec`,
`describe()`. Nothing is ever downloaded.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

import tiktoken
import tiktoken.load

from transformer_viewer.model.errors import CheckpointError, ModelError
from transformer_viewer.model.rust_calls import library_call

GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = "<|endoftext|>"
ENDOFTEXT_ID = 50256
GPT2_VOCAB = 50257
VOCAB_PADDING = 256  # rows past the tokenizer a vocabulary may be padded with (alignment for speed)
GPT2_PADDED_VOCAB = -(-GPT2_VOCAB // VOCAB_PADDING) * VOCAB_PADDING  # nanoGPT's 50304 fits

# Characters a prompt may have. A context of 128k tokens is about half a million characters; past
# a few million a paste is a file dropped in by mistake, and tokenizing it would take the
# tokenizer's time and memory before its last tokens were kept.
MAX_PROMPT_CHARS = 4_000_000

_VISIBLE = {" ": "·", "\n": "⏎", "\t": "⇥", "\r": "␍"}
# Lone surrogates: what Python makes of bytes that are not UTF-8 (a command line's, read with
# surrogateescape), which no tokenizer can encode.
_SURROGATES = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
GPT2_FIX = "reinstall transformer-viewer (its GPT-2 tokenizer is damaged)"


def ranks_path() -> str:
    return str(resources.files("transformer_viewer.assets").joinpath("gpt2.tiktoken"))


@functools.lru_cache(maxsize=1)
def gpt2_encoding() -> tiktoken.Encoding:
    with library_call(f"{ranks_path()}: GPT-2's tokenizer cannot be built", GPT2_FIX, CheckpointError,
                      library_errors=True):
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


def undecodable_count(text: str) -> int:
    """How many characters of `text` stand for bytes that were not UTF-8 (lone surrogates)."""
    return len(_SURROGATES.findall(text))


def replace_undecodable(text: str) -> str:
    """`text` with every byte that was not UTF-8 read as U+FFFD, as `bytes.decode(errors="replace")`
    would: both tokenizers take it the same way (tiktoken would do so silently, the tokenizers
    library refuses a lone surrogate with a TypeError)."""
    return _SURROGATES.sub(REPLACEMENT, text) if _SURROGATES.search(text) else text


def check_prompt_length(text: str) -> None:
    """Refuse, before tokenizing, a prompt longer than MAX_PROMPT_CHARS characters."""
    if len(text) > MAX_PROMPT_CHARS:
        raise ModelError(f"the prompt is {len(text):,} characters, more than the {MAX_PROMPT_CHARS:,} a prompt may "
                         "have; paste a shorter passage (the model sees only its last context-length tokens)")


@dataclass(frozen=True)
class Tokenized:
    ids: tuple[int, ...]
    labels: tuple[str, ...]  # visible label per token
    spans: tuple[tuple[int, int], ...]  # character span [start, end) of each token in the text
    text: str
    special: tuple[bool, ...] = ()  # per token: a special token (BOS, <|endoftext|>), shown apart


class TextTokenizer(Protocol):
    """What the session, the CLI and the views need of a tokenizer, whatever its backend."""

    spec: str  # "gpt2", or the folder holding the tokenizer.json
    n_vocab: int  # one past the largest id it makes
    prefix: tuple[int, ...]  # ids it starts every text with (a BOS), possibly none
    bos_id: int | None
    eos_id: int | None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...
    def decode(self, ids) -> str: ...
    def tokenize(self, text: str) -> Tokenized: ...
    def tokenize_last(self, text: str, n: int) -> tuple[Tokenized, int]: ...
    def label(self, i: int) -> str: ...
    def is_special(self, i: int) -> bool: ...
    def token_bytes(self, i: int) -> bytes: ...
    def document_prefix(self) -> list[int]: ...
    def describe(self) -> str: ...


class Tokenizer:
    """GPT-2 BPE with display labels and character spans."""

    name = spec = "gpt2"
    prefix: tuple[int, ...] = ()  # GPT-2 starts a text with nothing
    bos_id = eos_id = ENDOFTEXT_ID

    def __init__(self):
        self.enc = gpt2_encoding()
        self.n_vocab = self.enc.n_vocab

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        # `<|endoftext|>` typed by the user is the special token, not five ordinary pieces.
        check_prompt_length(text)
        with self._call("cannot encode this text"):
            return self.enc.encode(replace_undecodable(text), allowed_special={ENDOFTEXT})

    def _call(self, what: str):
        """A guarded call into tiktoken: its panics and errors become one line."""
        return library_call(f"GPT-2's tokenizer {what}", "check the prompt or the token ids", library_errors=True)

    def is_special(self, i: int) -> bool:
        return int(i) == ENDOFTEXT_ID

    def document_prefix(self) -> list[int]:
        """<|endoftext|>: the separator GPT-2 saw before every document."""
        return [ENDOFTEXT_ID]

    def describe(self) -> str:
        return "gpt2"

    def decode(self, ids) -> str:
        with self._call("cannot decode these token ids"):
            return self.enc.decode(list(ids), errors="replace")

    def token_bytes(self, i: int) -> bytes:
        with self._call(f"has no token {i}"):
            return self.enc.decode_single_token_bytes(int(i))

    def label(self, i: int) -> str:
        return visible_label(self.token_bytes(i))

    def tokenize(self, text: str) -> Tokenized:
        text = replace_undecodable(text)
        ids = self.encode(text)
        return self._tokenized(ids, tuple(self.spans(ids, text)), text)

    def _tokenized(self, ids, spans, text: str) -> Tokenized:
        return Tokenized(tuple(ids), tuple(self.label(i) for i in ids), tuple(spans), text,
                         tuple(i == ENDOFTEXT_ID for i in ids))

    def tokenize_last(self, text: str, n: int) -> tuple[Tokenized, int]:
        """The last `n` tokens of `text` (their text and spans start where they do) and how many
        tokens were dropped before them. Same result as slicing `tokenize(text)`, but labels and
        spans are made for the kept tokens only: a 1 MB paste costs its encoding, not seconds
        of per-token Python."""
        text = replace_undecodable(text)
        ids = self.encode(text)
        dropped = max(0, len(ids) - n)
        if not dropped:
            return self._tokenized(ids, self.spans(ids, text), text), 0
        kept = ids[dropped:]
        with self._call("cannot decode these token ids"):
            head = self.enc.decode_bytes(ids[:dropped])
        complete = _complete_prefix(head)
        start = min(len(complete.decode("utf-8", errors="replace")), len(text))
        tail = text[start:]
        spans = self.spans(kept, tail, pending=head[len(complete):])
        return self._tokenized(kept, spans, tail), dropped

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


@functools.lru_cache(maxsize=2)  # the model in use and the one before: a 256k vocabulary is ~100 MB
def load_folder(cls, folder: str, _stamp: tuple):
    """A folder's tokenizer of class `cls`, kept while the files' sizes and times (`_stamp`) stay."""
    return cls(folder)


def forget_loaded_tokenizers() -> None:
    """Drop the cached folder tokenizers (one panicked: the next load reads its files again)."""
    load_folder.cache_clear()


def decode_after(tokenizer, prefix_ids, new_ids) -> str:
    """The text `new_ids` add after `prefix_ids`. Decoding them alone can differ: a SentencePiece
    decoder drops the space a text starts with, and a character may begin before them."""
    if not len(new_ids):
        return ""
    head = tokenizer.decode(prefix_ids)
    full = tokenizer.decode([*prefix_ids, *new_ids])
    return full[len(head):] if full.startswith(head) else tokenizer.decode(new_ids)


def parse_token(spec: str | None, tokenizer, n_vocab: int, what: str = "--target") -> int | None:
    """A token given as an integer id or as text that is exactly one token of `tokenizer`."""
    if spec is None:
        return None
    digits = spec[1:] if spec.startswith("-") else spec
    if digits.isascii() and digits.isdigit():  # ASCII only: `'²'.isdigit()` is true, `int('²')` fails
        i = int(spec)
        if not 0 <= i < n_vocab:
            raise ModelError(f"{what} {i}: token ids run from 0 to {n_vocab - 1}")
        return i
    ids = tokenizer.encode(spec, add_special_tokens=False)
    if len(ids) != 1:
        pieces = " + ".join(repr(tokenizer.token_bytes(i).decode("utf-8", errors="replace")) for i in ids) or "nothing"
        noun = "GPT-2 tokens" if tokenizer.spec == "gpt2" else "tokens of this model's tokenizer"
        raise ModelError(f"{what} {spec!r} is {len(ids)} {noun} ({pieces}), not one; pass a single token "
                         f"(often with its leading space, e.g. ' Paris') or an integer id")
    if ids[0] >= n_vocab:
        raise ModelError(f"{what} {spec!r} is token {ids[0]}, outside this model's vocabulary of {n_vocab}")
    return ids[0]
