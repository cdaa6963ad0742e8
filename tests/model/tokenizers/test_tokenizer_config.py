"""tokenizer_config.json's switches that change ids: add_eos_token (an EOS ends the prompt, shown
as a special token) checked against transformers' PreTrainedTokenizerFast given the same
settings; add_prefix_space and legacy checked against AutoTokenizer on folders whose config names
the tokenizer class that reads them (LlamaTokenizer, GPT2Tokenizer). Also the bounds a hostile
tokenizer.json meets: regexes that backtrack without end are refused at load, and a prompt's
length in characters is bounded before it is tokenized."""

from __future__ import annotations

import json
import os
import warnings

import pytest

from tests.helpers import tokenizers as tc
from tests.helpers.tokenizers import TEXTS
from transformer_viewer.model.errors import CheckpointError, ModelError
from transformer_viewer.model.tokenizers.tokenizer import MAX_PROMPT_CHARS, Tokenizer
from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer

MS = {"bos_token": "<s>", "eos_token": "</s>"}
BL = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}


@pytest.fixture(scope="module")
def eos_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("eos")
    return {
        "metaspace": tc.metaspace(str(root / "ms"), config={**MS, "add_bos_token": True, "add_eos_token": True}),
        "metaspace_eos_only": tc.metaspace(str(root / "ms_eos"), template_bos=False,
                                           config={**MS, "add_bos_token": False, "add_eos_token": True}),
        "byte_level": tc.byte_level(str(root / "bl"), config={**BL, "add_bos_token": False, "add_eos_token": True}),
    }


@pytest.mark.parametrize("kind", ["metaspace", "metaspace_eos_only", "byte_level"])
@pytest.mark.parametrize("text", TEXTS)
def test_add_eos_token_matches_transformers(eos_folders, kind, text):
    ours, ref = load_tokenizer(eos_folders[kind]), tc.reference(eos_folders[kind])
    assert ours.encode(text) == ref(text)["input_ids"]
    assert list(ours.tokenize(text).ids) == ref(text)["input_ids"]
    assert ours.encode(text, add_special_tokens=False) == ref(text, add_special_tokens=False)["input_ids"]


def test_the_eos_ends_the_prompt_as_a_special_token(eos_folders):
    tok = load_tokenizer(eos_folders["metaspace"])
    t = tok.tokenize("hello world")
    assert t.ids[0] == tok.bos_id and t.ids[-1] == tok.eos_id == 2
    assert t.labels[-1] == "</s>" and t.special[-1] and not any(t.special[1:-1])
    assert t.spans[-1] == (len(t.text), len(t.text))  # it covers no character of the prompt
    assert "".join(t.text[a:b] for a, b in t.spans) == t.text
    assert "ends them with '</s>'" in tok.describe()
    # Cut to the context, the BOS stays first and the EOS last.
    kept, dropped = tok.tokenize_last("the quick brown fox jumps over the lazy dog", 5)
    assert len(kept.ids) == 5 and dropped > 0 and kept.ids[0] == tok.bos_id and kept.ids[-1] == tok.eos_id
    assert kept.special == (True, False, False, False, True)
    assert "".join(kept.text[a:b] for a, b in kept.spans) == kept.text


def test_no_eos_unless_the_config_asks(tmp_path):
    """A post-processor that appends </s> is not enough: a prompt is text to be continued."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import processors

    folder = tc.metaspace(str(tmp_path / "tail"), config=dict(MS))
    path = os.path.join(folder, "tokenizer.json")
    tk = Backend.from_file(path)
    tk.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    tk.save(path)
    assert tk.encode("hello").ids[-1] == 2
    ids = load_tokenizer(folder).encode("hello")
    assert ids[0] == 1 and ids[-1] != 2


def auto(folder):
    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(folder)


SPACING = [
    # (builder, tokenizer class, config switches)
    ("metaspace", "LlamaTokenizer", {"legacy": True}),
    ("metaspace", "LlamaTokenizer", {"legacy": False}),
    ("metaspace", "LlamaTokenizer", {"add_prefix_space": False}),
    ("metaspace", "LlamaTokenizer", {"add_prefix_space": True, "legacy": True}),
    ("byte_level", "GPT2Tokenizer", {"add_prefix_space": True}),
    ("byte_level", "GPT2Tokenizer", {"add_prefix_space": False}),
    ("llama3_style", "Qwen2Tokenizer", {"add_prefix_space": True}),  # a ByteLevel behind a Split
]


def llama3_style(folder: str, config: dict) -> str:
    tc.llama3_style(folder)
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return folder


@pytest.mark.parametrize("builder,cls,switches", SPACING, ids=[f"{b}-{json.dumps(s)}" for b, _c, s in SPACING])
def test_add_prefix_space_and_legacy_match_transformers(tmp_path, builder, cls, switches):
    base = MS if builder == "metaspace" else BL
    if builder == "llama3_style":
        base = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
    make = llama3_style if builder == "llama3_style" else getattr(tc, builder)
    folder = make(str(tmp_path / "tok"), config={**base, "tokenizer_class": cls, **switches})
    ours, ref = load_tokenizer(folder), auto(folder)
    assert type(ref).__name__ == cls
    for text in [*TEXTS, "<s>hello after a typed BOS", "a </s>b"]:
        assert ours.encode(text, add_special_tokens=False) == ref(text, add_special_tokens=False)["input_ids"], text
        assert ours.encode(text) == ref(text)["input_ids"], text
        tok = ours.tokenize(text)
        assert "".join(tok.text[a:b] for a, b in tok.spans) == tok.text


def test_the_switches_change_ids(tmp_path):
    """The cases above are not vacuous: each switch changes what the file alone would give."""
    plain = load_tokenizer(tc.byte_level(str(tmp_path / "plain")))
    spaced = load_tokenizer(tc.byte_level(str(tmp_path / "spaced"), config={**BL, "add_prefix_space": True}))
    assert plain.encode("Hello") != spaced.encode("Hello")
    first = load_tokenizer(tc.metaspace(str(tmp_path / "first"), config=dict(MS)))
    legacy = load_tokenizer(tc.metaspace(str(tmp_path / "legacy"), config={**MS, "legacy": True}))
    assert first.encode("<s>hello") != legacy.encode("<s>hello")
    assert first.encode("hello") == legacy.encode("hello")


def _hostile(tmp_path, edit) -> str:
    folder = tc.byte_level(str(tmp_path / "hostile"))
    path = os.path.join(folder, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    edit(spec)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    return folder


def _split(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def _pre(*patterns):
    return lambda spec: spec.__setitem__("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
        *(_split(p) for p in patterns), spec["pre_tokenizer"]]})


HOSTILE = {
    "nested quantifiers": (_pre("(a+)+$"), "repeats a group that holds a repeat (nested quantifiers)"),
    "repeated alternatives": (_pre(r"(?:\w|\d)*x"), "repeats a group that holds alternatives"),
    "in the normalizer": (lambda s: s.__setitem__("normalizer", {"type": "Replace", "pattern": {"Regex": "(x*)*y"},
                                                                 "content": "z"}), "nested quantifiers"),
    "a huge alternation": (_pre("|".join(f"w{i}" for i in range(200))), "has 200 alternatives (at most 64)"),
    "a pattern too long": (_pre("a" * 5000), "is 5,000 characters long (at most 2,000)"),
    "too many regexes": (_pre(*[f"x{i}" for i in range(40)]), "run 40 regexes, more than a real tokenizer's few"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_pathological_regex_is_refused_at_load(tmp_path, name):
    edit, expect = HOSTILE[name]
    folder = _hostile(tmp_path, edit)
    with pytest.raises(CheckpointError) as e:
        load_tokenizer(folder)
    message = str(e.value)
    assert "\n" not in message and expect in message and "tokenizer.json" in message, message


def test_the_patterns_real_tokenizers_use_load(tmp_path):
    """Llama 3's split pattern (and GPT-4o's, longer, with optional groups) are not refused."""
    o200k = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    assert load_tokenizer(tc.llama3_style(str(tmp_path / "llama3"))).encode("Hello world")
    assert load_tokenizer(_hostile(tmp_path, _pre(o200k))).encode("Hello world, it's 2024")


def test_a_prompt_too_long_is_refused_before_tokenizing(tmp_path):
    text = "a" * (MAX_PROMPT_CHARS + 1)
    for tok in (load_tokenizer(tc.metaspace(str(tmp_path / "ms"))), Tokenizer()):
        for method, args in ((tok.tokenize_last, (text, 8)), (tok.encode, (text,)), (tok.tokenize, (text,))):
            with pytest.raises(ModelError, match="characters, more than the 4,000,000 a prompt may have"):
                method(*args)
    assert len(Tokenizer().encode("a " * (MAX_PROMPT_CHARS // 2))) > 0  # at the bound: tokenized


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_a_context_shorter_than_bos_and_eos(eos_folders, n):
    tok = load_tokenizer(eos_folders["metaspace"])
    kept, _dropped = tok.tokenize_last("hello world", n)
    bos, *text, eos = tok.tokenize("hello world").ids
    expected = {0: (), 1: (eos,), 2: (bos, eos), 3: (bos, text[-1], eos)}  # the EOS goes last, the BOS next
    assert kept.ids == expected[n] and len(kept.spans) == n


def test_tokenizer_json_size_is_bounded_by_the_vocabulary_before_parsing(tmp_path):
    from transformer_viewer.model.tokenizers.tokenizer_files import (
        MAX_BYTES_PER_TOKEN,
        MAX_TOKENIZER_JSON,
        MIN_TOKENIZER_JSON_LIMIT,
        tokenizer_size_limit,
    )

    assert tokenizer_size_limit(None) == MAX_TOKENIZER_JSON
    assert tokenizer_size_limit(1000) == MIN_TOKENIZER_JSON_LIMIT
    assert tokenizer_size_limit(262_144) == 262_144 * MAX_BYTES_PER_TOKEN  # Gemma 3's 33 MB fits twice
    assert tokenizer_size_limit(10**9) == MAX_TOKENIZER_JSON
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(b"{" + b" " * MIN_TOKENIZER_JSON_LIMIT + b"}")  # not even parsed
    with pytest.raises(CheckpointError, match="more than the 8 MiB a tokenizer.json may have for a model of 500 tokens"):
        load_tokenizer(str(folder), vocab_size=500)
    with pytest.raises(CheckpointError, match="not a tokenizer the tokenizers library can read"):
        load_tokenizer(str(folder))  # no vocabulary to compare with: parsed, and refused by the library
