"""Triggers for the messages of a model's own tokenizer files: a missing, oversized, malformed or
mismatched tokenizer.json, and side files (tokenizer_config.json, special_tokens_map.json) that
say impossible things. Each is one line naming the file and what to do."""

from __future__ import annotations

import json
import os

from tests.hardening.message_case import Case, raised
from tests.helpers import tokenizers as tc
from tests.helpers.failing_open import fail_opens
from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer


def _folder(ctx, name, kind="metaspace", **kw) -> str:
    return getattr(tc, kind)(str(ctx.tmp / name), **kw)


def _write(folder, name, data) -> None:
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(os.path.join(folder, name), mode) as f:
        f.write(data)


def _with_file(name, data, kind="metaspace"):
    def trigger(ctx):
        folder = _folder(ctx, "tok", kind)
        _write(folder, name, data)
        return raised(lambda: load_tokenizer(folder))
    return trigger


def missing(ctx, sentencepiece=False):
    folder = ctx.tmp / "no-tokenizer"
    folder.mkdir()
    if sentencepiece:
        (folder / "tokenizer.model").write_bytes(b"\x0a\x05hello")
    return raised(lambda: load_tokenizer(str(folder), vocab_size=32000))


def too_large(ctx):
    from transformer_viewer.model.tokenizers import hf_tokenizer

    folder = _folder(ctx, "big")
    _write(folder, "tokenizer.json", "{" + " " * (1 << 20) + "}")
    ctx.mp.setattr(hf_tokenizer, "MAX_TOKENIZER_JSON", 1 << 20)
    return raised(lambda: load_tokenizer(folder))


def unreadable(ctx, error):
    folder = _folder(ctx, "locked")
    fail_opens(ctx.mp, os.path.join(folder, "tokenizer.json"), lambda _name: error)
    return raised(lambda: load_tokenizer(folder))


def edited_tokenizer_json(edit):
    def trigger(ctx):
        folder = _folder(ctx, "edited")
        path = os.path.join(folder, "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        edit(spec)
        _write(folder, "tokenizer.json", json.dumps(spec))
        return raised(lambda: load_tokenizer(folder))
    return trigger


def bos_not_in_vocabulary(ctx):
    folder = _folder(ctx, "nobos", config={"bos_token": "<|begin|>", "add_bos_token": True})
    return raised(lambda: load_tokenizer(folder))


def bos_not_named(ctx):
    folder = _folder(ctx, "unnamed", config={"add_bos_token": True})
    return raised(lambda: load_tokenizer(folder))


def vocabulary_larger_than_embedding(ctx):
    from tests.helpers.models import hf_config, hf_model
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint

    folder = _folder(ctx, "model")
    hf_model(hf_config(vocab_size=100, n_layer=1, n_head=2, n_embd=8, n_positions=16)).save_pretrained(folder)
    return raised(lambda: load_checkpoint(folder))


def written(name: str, spec: dict, **side):
    """A trigger loading a folder whose tokenizer.json is `spec` (and side files `side`)."""
    def trigger(ctx):
        folder = ctx.tmp / name
        folder.mkdir()
        _write(folder, "tokenizer.json", json.dumps(spec))
        for file, data in side.items():
            _write(folder, f"{file}.json", json.dumps(data))
        return raised(lambda: load_tokenizer(str(folder)))
    return trigger


def dropped_after_a_panic(ctx):
    from tests.helpers.panics import a_panic

    class Panicking:
        def encode(self, *_a, **_kw):
            raise a_panic("index out of bounds")

    tok = load_tokenizer(_folder(ctx, "panicky", "byte_level"))
    tok._tk = Panicking()
    raised(lambda: tok.encode("the cat"))
    return raised(lambda: tok.encode("the cat"))


def too_many_tokens(ctx):
    from transformer_viewer.model.tokenizers import tokenizer_pieces

    tok = load_tokenizer(_folder(ctx, "counted", "byte_level"))
    ctx.mp.setattr(tokenizer_pieces, "CALL_BUDGET", int(50 * tok.growth))
    ctx.mp.setattr(tokenizer_pieces, "MAX_PROMPT_TOKENS", 100)
    return raised(lambda: tok.encode("the cat sat on the mat " * 100))


WORDS = {"the": 0, "cat": 1}
DOUBLING = {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}


def cli_with_broken_tokenizer(ctx):
    from tests.helpers.models import hf_config, hf_model

    folder = _folder(ctx, "model")
    hf_model(hf_config(vocab_size=456, n_layer=1, n_head=2, n_embd=8, n_positions=16)).save_pretrained(folder)
    _write(folder, "tokenizer.json", '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [[')
    return ctx.cli("predict", "--checkpoint", folder, "--prompt", "hello", "--device", "cpu")


CASES = [
    Case("CLI predict, broken tokenizer.json", cli_with_broken_tokenizer,
         "tokenizer.json: not a tokenizer the tokenizers library can read"),
    Case("tokenizer.json missing", missing, "tokenizer.json is missing, and the model's vocabulary (32000 tokens) "
         "is its own, so GPT-2's tokenizer would feed it the wrong ids"),
    Case("only tokenizer.model", lambda ctx: missing(ctx, sentencepiece=True), "has tokenizer.model but no tokenizer.json"),
    Case("tokenizer.json too large", too_large, "more than the 1 MiB a tokenizer.json may have"),
    Case("tokenizer.json permission denied", lambda ctx: unreadable(ctx, PermissionError(13, "denied")),
         "permission denied; make it readable"),
    Case("tokenizer.json read error", lambda ctx: unreadable(ctx, OSError(5, "Input/output error")),
         "cannot be read (Input/output error)"),
    Case("tokenizer.json not UTF-8", _with_file("tokenizer.json", b"\xff\xfe{}"), "not UTF-8 text"),
    Case("tokenizer.json not JSON", _with_file("tokenizer.json", '{"model": {'),
         "tokenizer.json: not a tokenizer the tokenizers library can read (EOF while parsing"),
    Case("tokenizer.json with a 5000-digit number", _with_file("tokenizer.json", '{"model": {"vocab": {"a": 1'
                                                                  + "0" * 5000 + "}}}"),
         "tokenizer.json: not a tokenizer the tokenizers library can read"),
    Case("normalizer that inflates the text",
         edited_tokenizer_json(lambda s: s.__setitem__("normalizer", {"type": "Sequence", "normalizers": [
             {"type": "Replace", "pattern": {"String": " "}, "content": "x" * 100000}]})),
         "its normalizer inserts 100000 characters at a time"),
    Case("tokenizer.json without a model", _with_file("tokenizer.json", '{"version": "1.0"}'),
         "not a tokenizer the tokenizers library can read (Model missing"),
    Case("tokenizer.json the library refuses",
         edited_tokenizer_json(lambda s: s["model"].__setitem__("type", "Telepathy")),
         "not a tokenizer the tokenizers library can read"),
    Case("tokenizer.json nested too deeply",
         edited_tokenizer_json(lambda s: s.__setitem__("pre_tokenizer", _nested(300))),
         "not a tokenizer the tokenizers library can read (recursion limit exceeded"),
    Case("tokenizer_config.json not JSON", _with_file("tokenizer_config.json", "{'add_bos_token': True}"),
         "tokenizer_config.json: not valid JSON"),
    Case("tokenizer_config.json not an object", _with_file("tokenizer_config.json", "[true]"),
         "tokenizer_config.json: not a JSON object"),
    Case("add_bos_token not a bool", _with_file("tokenizer_config.json", '{"add_bos_token": "yes"}'),
         "add_bos_token is 'yes', not true or false"),
    Case("bos_token not a string", _with_file("special_tokens_map.json", '{"bos_token": 7}'),
         "special_tokens_map.json: bos_token is int, not a token string"),
    Case("generation_config.json not an object", _with_file("generation_config.json", "3"),
         "generation_config.json: not a JSON object"),
    Case("BOS not in the vocabulary", bos_not_in_vocabulary, "add_bos_token is true but its bos_token '<|begin|>' "
         "is not in tokenizer.json"),
    Case("BOS not named", bos_not_named, "add_bos_token is true but it names no bos_token"),
    Case("WordLevel without its unknown token", written("nounk", {
        "version": "1.0", "pre_tokenizer": {"type": "Whitespace"},
        "model": {"type": "WordLevel", "vocab": WORDS, "unk_token": "[UNK]"}}),
        "its WordLevel model's unknown token '[UNK]' is not in its vocabulary"),
    Case("generation_config.json BOS id past the vocabulary", written("bigbos", {
        "version": "1.0", "pre_tokenizer": {"type": "Whitespace"},
        "model": {"type": "WordLevel", "vocab": {**WORDS, "[UNK]": 2}, "unk_token": "[UNK]"}},
        generation_config={"bos_token_id": 10**30}),
        "generation_config.json: bos_token_id is an integer of about 31 digits, outside the tokenizer's vocabulary"),
    Case("normalizer doubling the text 24 times", written("doubling", {
        "version": "1.0", "normalizer": {"type": "Sequence", "normalizers": [DOUBLING] * 24},
        "model": {"type": "WordLevel", "vocab": {**WORDS, "[UNK]": 2}, "unk_token": "[UNK]"}}),
        "its normalizer and pre-tokenizer can make one character into up to 16,777,216"),
    Case("normalizer of a hundred steps", written("steps", {
        "version": "1.0", "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}] * 100},
        "model": {"type": "WordLevel", "vocab": {**WORDS, "[UNK]": 2}, "unk_token": "[UNK]"}}),
        "its normalizer has 100 steps, where a real tokenizer's has a few (at most 64)"),
    Case("tokenizer used after it panicked", dropped_after_a_panic,
         "tokenizer.json: this tokenizer panicked earlier and was dropped; open the model again"),
    Case("prompt past the token cap", too_many_tokens, "the prompt makes more than 100 tokens with this tokenizer"),
    Case("tokenizer larger than the embedding", vocabulary_larger_than_embedding,
         "tokens but the model's embedding only 100 rows; the tokenizer belongs to another model"),
]


def _nested(depth: int) -> dict:
    node = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    for _ in range(depth):
        node = {"type": "Sequence", "pretokenizers": [node]}
    return node
