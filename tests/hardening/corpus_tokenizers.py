"""Hostile tokenizer files and prompts, each in a Hugging Face folder with a tiny GPT-2-layout
model: Precompiled charsmaps the tokenizers library would panic on, normalizer and decoder chains
that grow a text without bound, a tokenizer.json far larger than its vocabulary needs, models
missing their unknown token, special-token ids past the vocabulary, prompt bytes that are not
UTF-8, and non-ASCII digits where an id or a regex count is read. Each is one clear line, or
loads and runs where the file is valid."""

from __future__ import annotations

import json
import os
import shutil

from tests.hardening.cli_cases import CliCase
from tests.helpers import tokenizers as tc
from tests.helpers.charsmaps import charsmap, precompiled
from tests.helpers.hardening import save_tiny

GROUPS = ("panics", "bombs", "unknown_token", "prompts", "digits", "special_ids")
VOCAB = 456  # the model's rows: the Metaspace test tokenizer's 200 pieces and 256 byte pieces fit
FIX = "restore the model's own"
CPU = ("--device", "cpu")


def _base_model(root: str) -> str:
    from tests.helpers.models import hf_config, hf_model

    folder = os.path.join(root, "_model")
    hf_model(hf_config(vocab_size=VOCAB, n_layer=1, n_head=2, n_embd=8, n_positions=64)).save_pretrained(folder)
    tc.metaspace(os.path.join(root, "_tokenizer"))
    return folder


def build(root: str) -> list[CliCase]:
    os.makedirs(root, exist_ok=True)
    model = _base_model(root)
    with open(os.path.join(root, "_tokenizer", "tokenizer.json"), encoding="utf-8") as f:
        metaspace = json.load(f)
    cases: list[CliCase] = []

    def folder(name: str, tokenizer: dict | str | None = None, **side: dict) -> str:
        path = os.path.join(root, name)
        shutil.copytree(model, path)
        spec = metaspace if tokenizer is None else tokenizer
        with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(spec if isinstance(spec, str) else json.dumps(spec))
        for file, data in side.items():
            with open(os.path.join(path, f"{file}.json"), "w", encoding="utf-8") as f:
                json.dump(data, f)
        return path

    def edited(**parts) -> dict:
        return {**metaspace, **parts}

    def info(name, group, tokenizer, expect, **side):
        cases.append(CliCase(name, group, ("info", "--checkpoint", folder(name, tokenizer, **side)), expect))

    def predict(name, group, tokenizer, prompt, expect, **side):
        cases.append(CliCase(name, group, ("predict", "--checkpoint", folder(name, tokenizer, **side), "--prompt",
                                           prompt, *CPU), expect))

    # -- panics: Precompiled charsmaps the library would panic on, refused before it reads them ----
    a = ord("a")
    info("charsmap_not_base64", "panics", edited(normalizer={"type": "Precompiled", "precompiled_charsmap": "!!"}),
         "precompiled_charsmap is not base64")
    info("charsmap_null", "panics", edited(normalizer={"type": "Precompiled", "precompiled_charsmap": None}),
         "precompiled_charsmap of nonetype")
    info("charsmap_two_bytes", "panics", edited(normalizer=precompiled(b"\x01\x00")),
         "shorter than its own 4-byte header")
    info("charsmap_trie_cut_short", "panics", edited(normalizer=precompiled(charsmap({a: "b"}, trie_size=1 << 20))),
         "claims a trie of 262,144 units")
    predict("charsmap_unit_past_end", "panics", edited(normalizer=precompiled(charsmap({a: "b"}, root_offset=2048))),
            "a cat", "pointing past the trie's end")
    predict("charsmap_leaf_past_strings", "panics",
            edited(normalizer=precompiled(charsmap({a: "b"}, values={a: 999}))), "a cat", "past its replacement strings")
    predict("charsmap_leaf_inside_character", "panics",
            edited(normalizer=precompiled(charsmap({a: "é"}, values={a: 1}))), "a cat", "inside a character")
    # The type spelled with a JSON escape: what the library reads is what is checked.
    escaped = json.dumps(edited(normalizer={"type": "Precompiled", "precompiled_charsmap": None})).replace(
        '"Precompiled"', '"Pre\\u0063ompiled"')
    info("charsmap_escaped_name", "panics", escaped, "precompiled_charsmap of nonetype")
    nested = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, precompiled(charsmap({a: "b"}, values={a: 7}))]}
    info("charsmap_in_a_sequence", "panics", edited(normalizer=nested), "past its replacement strings")
    predict("charsmap_valid", "panics", edited(normalizer=precompiled(charsmap({a: "e", ord("\t"): " "}))),
            "a cat\tsat", None)

    # -- bombs: growth bounded from the specs, refused at load, before any text meets them ---------
    def chain(step: dict, n: int, key: str = "normalizers") -> dict:
        return {"type": "Sequence", key: [step] * n}

    doubling = {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}
    predict("replace_chain_24", "bombs", edited(normalizer=chain(doubling, 24)), "aaaa", "up to 33,554,432")
    info("replace_chain_28_info", "bombs", edited(normalizer=chain(doubling, 28)), "up to 536,870,912")
    info("empty_pattern_chain", "bombs", edited(normalizer=chain(
        {"type": "Replace", "pattern": {"String": ""}, "content": "x"}, 8)), "up to 13,122")
    info("empty_match_regex_chain", "bombs", edited(normalizer=chain(
        {"type": "Replace", "pattern": {"Regex": "z*"}, "content": "y"}, 8)), "up to 131,072")
    info("prepend_chain", "bombs", edited(normalizer=chain({"type": "Prepend", "prepend": "▁▁▁▁"}, 6)),
         "up to 31,250")
    info("nfkc_chain", "bombs", edited(normalizer=chain({"type": "NFKC"}, 4)), "up to 209,952")
    info("decoder_chain", "bombs", edited(decoder=chain(doubling, 24, "decoders")), "its decoder can make")
    info("charsmap_growth_chain", "bombs", edited(normalizer=chain(precompiled(charsmap({a: "a" * 16})), 3)),
         "up to 8,192")
    info("normalizer_of_a_hundred_steps", "bombs", edited(normalizer=chain({"type": "Strip", "strip_left": True,
                                                                            "strip_right": True}, 100)),
         "its normalizer has 100 steps")
    info("decoder_past_any_float", "bombs", edited(decoder=chain(
        {"type": "Replace", "pattern": {"String": "a"}, "content": "b" * 100_000}, 64, "decoders")),
         "its decoder can make one character into up to more than 1e308")
    # Below the bound but a long prompt: encoded in pieces, its tokens counted as they come.
    eightfold = edited(normalizer=chain(doubling, 9))
    predict("prompt_tokens_past_the_cap", "bombs", eightfold, "a" * 9000, "more than 4,000,000 tokens")
    predict("long_prompt_in_pieces", "bombs", edited(normalizer=chain(doubling, 1)), "the cat sat on a mat " * 14000,
            None)
    oversized = folder("tokenizer_json_oversized", edited(added_tokens=[{
        "id": VOCAB + i, "content": f"<pad_{i:07d}>" + "x" * 60, "single_word": False, "lstrip": False,
        "rstrip": False, "normalized": False, "special": True} for i in range(120_000)]))
    cases.append(CliCase("tokenizer_json_oversized", "bombs", ("info", "--checkpoint", oversized),
                         "for a model of 456 tokens"))

    # -- unknown tokens: models that fail on a word outside their vocabulary ------------------------
    vocab = {"[UNK]": 0, "the": 1, "cat": 2, "a": 3}
    whitespace = {"type": "Whitespace"}
    info("wordlevel_without_unk", "unknown_token", {
        "version": "1.0", "pre_tokenizer": whitespace,
        "model": {"type": "WordLevel", "vocab": {"the": 0, "cat": 1, "a": 2}, "unk_token": "[UNK]"}},
        "wordlevel model's unknown token '[unk]' is not in its vocabulary")
    info("wordpiece_without_unk", "unknown_token", {
        "version": "1.0", "pre_tokenizer": whitespace,
        "model": {"type": "WordPiece", "vocab": {"the": 0, "cat": 1, "a": 2}, "unk_token": "[UNK]",
                  "continuing_subword_prefix": "##", "max_input_chars_per_word": 100}},
        "wordpiece model's unknown token '[unk]' is not in its vocabulary")
    predict("unigram_without_unk", "unknown_token", {
        "version": "1.0", "pre_tokenizer": whitespace,
        "model": {"type": "Unigram", "unk_id": None, "vocab": [[k, -1.0] for k in ("a", "the", "cat")]}},
        "the dog", "cannot encode this text (encountered an unknown token")
    predict("bpe_unk_not_in_vocab", "unknown_token", {
        "version": "1.0", "pre_tokenizer": whitespace,
        "model": {"type": "BPE", "vocab": {"t": 0, "h": 1, "e": 2, "a": 3}, "merges": [], "unk_token": "<unk>"}},
        "the dog", "cannot encode this text (unk token `<unk>` not found")
    predict("wordlevel_with_unk", "unknown_token", {
        "version": "1.0", "pre_tokenizer": whitespace,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}, "the dog", None)

    # -- prompts that are not UTF-8: read with replacement, the same for both tokenizers ------------
    undecodable = "caf" + b"\xe9 \xff\xfe au lait".decode("utf-8", "surrogateescape")
    predict("prompt_not_utf8_tokenizers", "prompts", None, undecodable, None)
    gpt2 = save_tiny(os.path.join(root, "gpt2_tiny.safetensors"))
    cases.append(CliCase("prompt_not_utf8_gpt2", "prompts", ("predict", "--checkpoint", gpt2, "--prompt", undecodable,
                                                             *CPU), None))
    cases.append(CliCase("target_not_utf8", "prompts", ("scan", "--checkpoint", gpt2, "--prompt", "The cat sat",
                                                        "--target", b" \xff".decode("utf-8", "surrogateescape"),
                                                        *CPU), None))

    # -- digits: ASCII only where a count or an id is read ------------------------------------------
    cases.append(CliCase("target_superscript_two", "digits", ("scan", "--checkpoint", gpt2, "--prompt", "The cat sat",
                                                              "--target", "²", *CPU), None))
    cases.append(CliCase("target_arabic_indic_digit", "digits", ("scan", "--checkpoint", gpt2, "--prompt",
                                                                 "The cat sat", "--target", "٣٣٣٣", *CPU),
                         "tokens"))
    cases.append(CliCase("mask_arabic_indic_layer", "digits", ("predict", "--checkpoint", gpt2, "--prompt", "The cat",
                                                               "--mask", "٣.1", *CPU), "bad --mask '٣.1'"))
    info("regex_count_superscript", "digits", edited(normalizer={
        "type": "Replace", "pattern": {"Regex": "a{²}"}, "content": "b"}), None)
    info("regex_range_superscript", "digits", edited(pre_tokenizer={
        "type": "Split", "pattern": {"Regex": "a{1,²}"}, "behavior": "Isolated", "invert": False}), None)

    # -- special-token ids past the vocabulary (generation_config.json beside tokenizer.json) ------
    info("bos_id_huge", "special_ids", None, "bos_token_id is an integer of about 31 digits", generation_config={
        "bos_token_id": 10**30, "eos_token_id": 2})
    info("eos_id_list_huge", "special_ids", None, "eos_token_id is an integer of about 31 digits", generation_config={
        "bos_token_id": 1, "eos_token_id": [10**30, 2]})
    return cases
