"""A model's own `tokenizer.json`, run by Hugging Face's `tokenizers` library.

Same interface as the GPT-2 `Tokenizer`: ids, visible labels, each token's character span in the
prompt, and which tokens are special. Labels are made from the vocabulary entry itself, whatever
the tokenizer's style: byte-level BPE (`Ġ` is a space byte), SentencePiece-style Metaspace (`▁` is a
space), byte-fallback pieces (`<0x0A>` is the byte 0x0A); special tokens keep their text (`<s>`)
and are flagged, so views can show them apart.

The tokens a text starts with (Llama's and Gemma's BOS) are the post-processor's, unless
`tokenizer_config.json` says `add_bos_token` explicitly. An EOS ends a prompt only when the config
says `add_eos_token: true` (the post-processor's own tail is ignored): a prompt is text to be
continued, and an EOS at its end asks what follows the end of the document. The config's
`add_prefix_space` and `legacy` set the pre-tokenizer's leading space as transformers' own
tokenizer classes build it from them (a ByteLevel's `add_prefix_space`; a Metaspace's
`prepend_scheme`: "never" without a prefix space, "always" when legacy, else "first"). These are
the settings as transformers 4 and a `PreTrainedTokenizerFast` given them apply them; transformers
5's AutoTokenizer ignores add_bos_token/add_eos_token when a tokenizer.json is present.

Every regex of the normalizer and pre-tokenizer is checked before the first prompt meets it
(`tokenizer_spec`): the library's regex engine backtracks, so a hostile pattern could stall
on one line of text. How much the normalizer, pre-tokenizer and decoder can grow a text is bounded
from their specs (`tokenizer_growth`), and a Precompiled charsmap, on which the library panics
rather than failing, is checked before the library reads the file (`charsmap`). A prompt whose
bound passes what one encode call may make is encoded in pieces cut before a word, its token
count checked after each (`tokenizer_pieces`). Every call into the library is guarded
(`rust_calls`): a panic or a library error is one line, and a tokenizer that panicked is dropped.
"""

from __future__ import annotations

import functools
import json
import os
import re

from tokenizers import Tokenizer as BackendTokenizer

from transformer_viewer.model.errors import CheckpointError, ModelError
from transformer_viewer.model.rust_calls import library_call
from transformer_viewer.model.tokenizers.tokenizer import (
    Tokenized,
    check_prompt_length,
    forget_loaded_tokenizers,
    replace_undecodable,
    visible_label,
)
from transformer_viewer.model.tokenizers.tokenizer_files import (
    MAX_TOKENIZER_JSON,
    SpecialTokens,
    read_special_tokens,
    read_text,
    tokenizer_json_path,
)
from transformer_viewer.model.tokenizers.tokenizer_growth import check_before_reading, check_growth
from transformer_viewer.model.tokenizers.tokenizer_pieces import Encoded, encode_in_pieces
from transformer_viewer.model.tokenizers.tokenizer_spec import (
    MAX_INSERT,
    check_patterns,
    has_type,
    longest_insert,
    metaspace_char,
    respace,
    spec_of,
)

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
FIX = "restore the model's own tokenizer.json"
UNKNOWN_TOKEN_MODELS = ("WordLevel", "WordPiece")  # models that fail on any word outside the vocabulary


@functools.lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet backwards: the printable character each byte was mapped to -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class HFTokenizer:
    """A folder's tokenizer.json with the BOS settings of its side files."""

    name = "tokenizer.json"

    def __init__(self, folder: str):
        self.spec = os.path.abspath(folder)
        path = self._path = tokenizer_json_path(folder)
        self._broken: str | None = None  # the message of a panic, after which the tokenizer is not used
        text = read_text(path, MAX_TOKENIZER_JSON, "tokenizer.json")
        check_before_reading(path, text)
        # The library's parser bounds nesting (128 levels) and numbers; what it refuses is one line.
        with library_call(f"{path}: not a tokenizer the tokenizers library can read", FIX, CheckpointError,
                          library_errors=True):
            self._tk = BackendTokenizer.from_str(text)
        del text
        with library_call(f"{path}: the tokenizers library cannot set this tokenizer up", FIX, CheckpointError,
                          library_errors=True):
            self._set_up(path, folder)

    def _set_up(self, path: str, folder: str) -> None:
        # A prompt is never cut or padded behind our back: truncation is ours (tokenize_last).
        self._tk.no_truncation()
        self._tk.no_padding()
        # The style, from the pieces as the library read them (small JSON, not the whole vocabulary).
        spec = {part: spec_of(getattr(self._tk, part)) for part in ("normalizer", "pre_tokenizer", "decoder")}
        self._byte_level = has_type(spec["pre_tokenizer"], "ByteLevel") or has_type(spec["decoder"], "ByteLevel")
        self._space = metaspace_char(spec)
        check_patterns(path, spec["normalizer"], spec["pre_tokenizer"])
        longest = longest_insert(spec["normalizer"])
        if longest > MAX_INSERT:
            # Each space of a prompt would grow by that much: a pasted page could take gigabytes.
            raise CheckpointError(f"{path}: its normalizer inserts {longest} characters at a time, where a real "
                                  f"tokenizer inserts one or two (at most {MAX_INSERT}); restore the model's own "
                                  "tokenizer.json")
        self.growth = check_growth(path, spec)
        self._byte_fallback = bool(getattr(self._tk.model, "byte_fallback", False))
        self._kind = type(self._tk.model).__name__  # BPE, Unigram, WordPiece, WordLevel
        unk = getattr(self._tk.model, "unk_token", None)
        if self._kind in UNKNOWN_TOKEN_MODELS and isinstance(unk, str) and self._tk.token_to_id(unk) is None:
            raise CheckpointError(f"{path}: its {self._kind} model's unknown token {unk!r} is not in its vocabulary, "
                                  f"so any word outside the vocabulary would fail to encode; {FIX}")
        added = self._tk.get_added_tokens_decoder()
        self._special = frozenset(i for i, t in added.items() if t.special)
        # Ids run from 0; added tokens may sit past the model's own (get_vocab would build a
        # dict of every token: a second for a 250k vocabulary).
        self.n_vocab = max(self._tk.get_vocab_size(with_added_tokens=True), max(added, default=-1) + 1)
        self._setup_special(read_special_tokens(folder, self.n_vocab))

    def _setup_special(self, st: SpecialTokens) -> None:
        # generation_config.json's ids are checked against this vocabulary as they are read.
        self.bos_id = self._tk.token_to_id(st.bos) if st.bos is not None else st.bos_id
        self.eos_id = self._tk.token_to_id(st.eos) if st.eos is not None else st.eos_id
        if st.add_bos is None:
            self.prefix = tuple(self._post_processor_prefix())
        else:
            self.prefix = (self._required("bos", self.bos_id, st.bos),) if st.add_bos else ()
        self.suffix = (self._required("eos", self.eos_id, st.eos),) if st.add_eos else ()
        if self.bos_id is None and self.prefix:
            self.bos_id = self.prefix[0]
        # BOS and EOS are shown as special even where the file forgot to mark them so.
        self._special |= {i for i in (self.bos_id, self.eos_id, *self.prefix, *self.suffix) if i is not None}
        self._set_prefix_space(st.add_prefix_space, st.legacy)

    def _required(self, kind: str, token_id: int | None, text: str | None) -> int:
        """The id of the BOS/EOS tokenizer_config.json asks to add, which must exist."""
        if token_id is None:
            what = f"its {kind}_token {text!r} is not in tokenizer.json" if text else f"it names no {kind}_token"
            raise CheckpointError(f"{os.path.join(self.spec, 'tokenizer_config.json')}: add_{kind}_token is true but "
                                  f"{what}; restore the model's own tokenizer files")
        return token_id

    def _set_prefix_space(self, add_prefix_space: bool | None, legacy: bool | None) -> None:
        """Apply the config's add_prefix_space / legacy to the pre-tokenizer's leading space."""
        pre = self._tk.pre_tokenizer
        if pre is None or (add_prefix_space is None and legacy is None):
            return
        spec = spec_of(pre)
        if respace(spec, add_prefix_space, legacy):
            pre.__setstate__(json.dumps(spec).encode("utf-8"))
            self._tk.pre_tokenizer = pre

    def _post_processor_prefix(self) -> list[int]:
        """The ids tokenizer.json's post-processor puts before a text (its template's BOS)."""
        plain = self._tk.encode("a", add_special_tokens=False).ids
        full = self._tk.encode("a").ids
        for start in range(len(full) - len(plain) + 1):
            if full[start:start + len(plain)] == plain:
                return full[:start]
        return []

    # -- ids ------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids the model sees for `text` (with the BOS it expects unless add_special_tokens=False).
        Special tokens typed in the text (`<s>`) are those tokens, as in the model's own tokenizer."""
        ids = self._encode(replace_undecodable(text)).ids
        return [*self.prefix, *ids, *self.suffix] if add_special_tokens else ids

    def decode(self, ids) -> str:
        with self._call("cannot decode these token ids"):
            return self._tk.decode([int(i) for i in ids], skip_special_tokens=False)

    # -- guarded library calls ------------------------------------------------------------
    def _call(self, what: str):
        """A call into the library: its errors are one line; a panic drops this tokenizer."""
        if self._broken is not None:
            raise ModelError(f"{self._path}: this tokenizer panicked earlier and was dropped; open the model again")
        return library_call(f"{self._path}: the tokenizer {what}", FIX, library_errors=True, on_panic=self._drop)

    def _drop(self, message: str) -> None:
        """After a panic the library's object may be half-changed: never use it again."""
        self._broken = message
        forget_loaded_tokenizers()

    def _encode(self, text: str) -> Encoded:
        """`text` without BOS/EOS, through the library in as many calls as its growth bound needs."""
        check_prompt_length(text)
        return encode_in_pieces(lambda piece: self._tk.encode(piece, add_special_tokens=False), text, self.growth,
                                lambda: self._call("cannot encode this text"))

    def document_prefix(self) -> list[int]:
        """What a document starts with for this model: its BOS when it adds one, else its BOS or
        EOS token (the separator GPT-2-style models see between documents), else nothing."""
        if self.prefix:
            return list(self.prefix)
        sep = self.bos_id if self.bos_id is not None else self.eos_id
        return [] if sep is None else [sep]

    # -- labels ---------------------------------------------------------------------------
    def is_special(self, i: int) -> bool:
        return int(i) in self._special

    def _piece(self, i: int) -> str | None:
        """The vocabulary entry of id `i` (None: not an id of this tokenizer)."""
        if not 0 <= int(i) < self.n_vocab:
            return None
        with self._call(f"cannot look up token {int(i)}"):
            return self._tk.id_to_token(int(i))

    def token_bytes(self, i: int) -> bytes:
        """The bytes a token stands for (a special token: its text)."""
        piece = self._piece(i)
        if piece is None:
            raise KeyError(f"token id {i} is not in the vocabulary")
        if int(i) in self._special:
            return piece.encode("utf-8")
        if self._byte_fallback:
            m = _BYTE_PIECE.fullmatch(piece)
            if m:
                return bytes([int(m.group(1), 16)])
        if self._byte_level:
            table = byte_decoder()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
            return piece.encode("utf-8")  # an added token stored as plain text
        return piece.replace(self._space, " ").encode("utf-8")

    def label(self, i: int) -> str:
        if int(i) in self._special:
            return self._piece(i) or f"<{int(i)}>"
        return visible_label(self.token_bytes(i))

    # -- prompts --------------------------------------------------------------------------
    def tokenize(self, text: str) -> Tokenized:
        return self.tokenize_last(text, None)[0]

    def tokenize_last(self, text: str, n: int | None) -> tuple[Tokenized, int]:
        """The text's tokens, keeping the last `n` (the BOS stays first and an EOS the config asks
        for last: the model expects them) and how many were dropped; the kept text starts where
        the first kept token does."""
        text = replace_undecodable(text)
        enc = self._encode(text)
        ids = enc.ids
        prefix, suffix = list(self.prefix), list(self.suffix)
        if n is not None:  # a context too short for them all keeps their last n
            suffix = suffix[max(0, len(suffix) - n):]
            prefix = prefix[max(0, len(prefix) - (n - len(suffix))):]
        keep = len(ids) if n is None else max(0, min(len(ids), n - len(prefix) - len(suffix)))
        dropped = len(ids) - keep
        if dropped:
            # Spans of the kept tokens only (and the one before, where the first kept span starts):
            # a 1 MB paste costs its encoding, not a Python pass over every token.
            spans = _spans(enc.offsets_from(dropped - 1), len(text))[1:]
        else:
            spans = _spans(enc.offsets_from(0), len(text))
        ids = ids[dropped:]
        start = spans[0][0] if dropped and spans else (len(text) if dropped else 0)
        tail = text[start:]
        spans = [(a - start, b - start) for a, b in spans]
        all_ids = tuple(prefix + ids + suffix)
        return Tokenized(
            ids=all_ids,
            labels=tuple(self.label(i) for i in all_ids),
            spans=tuple([(0, 0)] * len(prefix) + spans + [(len(tail), len(tail))] * len(suffix)),
            text=tail,
            special=tuple(self.is_special(i) for i in all_ids),
        ), dropped

    def describe(self) -> str:
        style = ("byte-level " if self._byte_level else "") + self._kind + (" with byte fallback" if self._byte_fallback else "")
        bos = f", starts texts with {self.label(self.prefix[0])!r}" if self.prefix else ""
        eos = f", ends them with {self.label(self.suffix[-1])!r}" if self.suffix else ""
        return f"tokenizer.json ({style}, {self.n_vocab} tokens{bos}{eos})"


def _spans(offsets, n_chars: int) -> list[tuple[int, int]]:
    """Contiguous character spans from the library's offsets. A token ends where the next one's
    text starts, at the latest: the offsets of pieces of one character all cover the character,
    and the character belongs to the token that completes it (as for GPT-2's tokenizer). The
    library trims spaces off some offsets; contiguity gives them back to their token."""
    ends = [min(e, n_chars) for _s, e in offsets]
    later_start = n_chars
    for i in range(len(offsets) - 1, -1, -1):
        ends[i] = min(ends[i], later_start)
        later_start = min(later_start, offsets[i][0])
    if ends:
        ends[-1] = n_chars  # whatever a normalizer dropped at the end belongs to the last token
    spans, done = [], 0
    for e in ends:
        end = max(done, e)
        spans.append((done, end))
        done = end
    return spans
