"""A model's own tokenizer.json, checked against transformers' PreTrainedTokenizerFast on the same
files: the same ids (with and without BOS as tokenizer_config.json says), labels for each style
(byte-level `Ġ`, Metaspace `▁`, byte fallback `<0x0A>`, special tokens kept and flagged), and
character spans that partition the prompt as GPT-2's do."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import tokenizers as tc
from tests.helpers.tokenizers import TEXTS
from transformer_viewer.model.tokenizers.hf_tokenizer import HFTokenizer
from transformer_viewer.model.tokenizers.tokenizer import decode_after, parse_token, visible_label
from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    return {
        "byte_level": tc.byte_level(str(root / "bl")),
        "metaspace": tc.metaspace(str(root / "ms")),
        # tokenizer_config.json turns the template's BOS off: the config wins, as in transformers.
        "metaspace_no_bos": tc.metaspace(str(root / "ms_nobos"), config={"bos_token": "<s>", "eos_token": "</s>",
                                                                           "add_bos_token": False}),
        # The template has no BOS, the config asks for one.
        "metaspace_config_bos": tc.metaspace(str(root / "ms_cfg"), template_bos=False,
                                             config={"bos_token": "<s>", "add_bos_token": True}),
        # No word on BOS in the config: the tokenizer.json's own post-processor decides.
        "metaspace_template": tc.metaspace(str(root / "ms_tpl"), config={"bos_token": "<s>"}),
        "nfc": tc.nfc_byte_level(str(root / "nfc")),
        "llama3": tc.llama3_style(str(root / "llama3")),
        "gemma": tc.gemma_style(str(root / "gemma")),
    }


@pytest.mark.parametrize("kind", ["byte_level", "metaspace", "metaspace_no_bos", "metaspace_config_bos",
                                  "metaspace_template", "nfc", "llama3", "gemma"])
@pytest.mark.parametrize("text", TEXTS)
def test_ids_match_transformers(folders, kind, text):
    ours, ref = load_tokenizer(folders[kind]), tc.reference(folders[kind])
    assert list(ours.tokenize(text).ids) == ref(text)["input_ids"]
    assert ours.encode(text) == ref(text)["input_ids"]
    assert ours.encode(text, add_special_tokens=False) == ref(text, add_special_tokens=False)["input_ids"]


def test_bos_as_configured(folders):
    starts = {kind: load_tokenizer(folders[kind]).tokenize("hello").ids[0] for kind in folders}
    bos = load_tokenizer(folders["metaspace"]).bos_id
    assert bos == 1
    assert starts["metaspace"] == starts["metaspace_config_bos"] == starts["metaspace_template"] == bos
    assert starts["metaspace_no_bos"] != bos and starts["byte_level"] != 0
    assert tc.reference(folders["metaspace_template"])("hello")["input_ids"][0] == bos
    for kind, name in (("llama3", "<|begin_of_text|>"), ("gemma", "<bos>")):
        tok = load_tokenizer(folders[kind]).tokenize("hello")
        assert tok.labels[0] == name and tok.special[0] and not any(tok.special[1:])


def test_special_tokens_are_kept_and_flagged(folders):
    tok = load_tokenizer(folders["metaspace"]).tokenize("a <s> b")
    assert tok.labels[0] == "<s>" and tok.special[0] and tok.spans[0] == (0, 0)
    typed = tok.labels.index("<s>", 1)  # typed in the prompt: the special token, as in transformers
    assert tok.special[typed] and tok.text[slice(*tok.spans[typed])].strip() == "<s>"
    assert sum(tok.special) == 2
    bl = load_tokenizer(folders["byte_level"]).tokenize("end<|endoftext|>next")
    assert bl.special == tuple(lab == "<|endoftext|>" for lab in bl.labels) and any(bl.special)


def _piece_bytes(piece: str, kind: str) -> bytes:
    """A vocabulary entry's bytes by the style's definition, spelled out independently of ours."""
    if kind in ("byte_level", "llama3"):
        # GPT-2's table: printable bytes map to themselves, the others to chr(256 + n) in order.
        keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
        table = {chr(b): b for b in keep}
        table.update({chr(256 + n): b for n, b in enumerate(b for b in range(256) if b not in keep)})
        return bytes(table[c] for c in piece)
    if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
        return bytes([int(piece[3:5], 16)])
    return piece.replace("▁", " ").encode()


@pytest.mark.parametrize("kind", ["byte_level", "metaspace", "llama3", "gemma"])
def test_labels_follow_the_vocabulary_entry(folders, kind):
    ours, ref = load_tokenizer(folders[kind]), tc.reference(folders[kind])
    text = "Hello world,\n" + tc.UNSEEN + "\tthe end"
    tok = ours.tokenize(text)
    pieces = ref.convert_ids_to_tokens(list(tok.ids))
    for label, piece, special in zip(tok.labels, pieces, tok.special, strict=True):
        assert label == (piece if special else visible_label(_piece_bytes(piece, kind)))
    assert not any("Ġ" in lab or "▁" in lab or "Ċ" in lab for lab in tok.labels)
    assert any("·w" in lab for lab in tok.labels)  # the space before "world", made visible
    assert "⏎" in tok.labels
    # Every byte of the text is some ordinary token's (SentencePiece adds one space in front).
    spelled = b"".join(ours.token_bytes(i) for i, s in zip(tok.ids, tok.special, strict=True) if not s)
    assert spelled == (b" " if kind == "metaspace" else b"") + text.encode()  # Gemma's normalizer adds none


def test_byte_fallback_pieces(folders):
    ours = load_tokenizer(folders["metaspace"])
    tok = ours.tokenize("🤗")
    pieces = tc.reference(folders["metaspace"]).convert_ids_to_tokens(list(tok.ids))
    assert pieces[-4:] == ["<0xF0>", "<0x9F>", "<0xA4>", "<0x97>"]
    assert tok.labels[-4:] == ("\\xf0", "\\x9f", "\\xa4", "\\x97")
    assert ours.label(ours._tk.token_to_id("<0x0A>")) == "⏎"
    assert ours.label(ours._tk.token_to_id("<0x41>")) == "A"


@pytest.mark.parametrize("kind", ["byte_level", "metaspace", "nfc", "llama3", "gemma"])
@pytest.mark.parametrize("text", TEXTS)
def test_spans_partition_the_text(folders, kind, text):
    ours = load_tokenizer(folders[kind])
    tok = ours.tokenize(text)
    assert tok.text == text
    content = [span for span, s in zip(tok.spans, tok.special, strict=True) if not s or span != (0, 0)]
    if content:
        assert content[0][0] == 0 and content[-1][1] == len(text)
    for (a, b), (c, _d) in zip(tok.spans, tok.spans[1:], strict=False):
        assert a <= b and (b == c or (a, b) == (0, 0))
    assert "".join(text[a:b] for a, b in tok.spans) == text


@pytest.mark.parametrize("kind", ["byte_level", "metaspace"])
def test_a_split_character_belongs_to_the_token_that_completes_it(folders, kind):
    ours = load_tokenizer(folders[kind])
    text = "a 🤗 b"
    tok = ours.tokenize(text)
    pieces = [ours.token_bytes(i) for i in tok.ids]
    for i, (piece, (a, b)) in enumerate(zip(pieces, tok.spans, strict=True)):
        if tok.special[i]:
            continue
        if piece in (b"\xf0", b"\x9f", b"\xa4", b"\x9f\xa4", b"\xf0\x9f"):
            assert a == b  # only part of the emoji: nothing of the text yet
        if piece.endswith(b"\x97"):
            assert text[a:b].endswith("🤗")


@pytest.mark.parametrize("kind", ["byte_level", "metaspace"])
def test_tokenize_last_keeps_the_bos_and_the_last_tokens(folders, kind):
    ours = load_tokenizer(folders[kind])
    text = "the quick brown fox jumps over the lazy dog, hello world " * 3
    full = ours.tokenize(text)
    n = 12
    tok, dropped = ours.tokenize_last(text, n)
    prefix = len(ours.prefix)
    assert len(tok.ids) == n and dropped == len(full.ids) - n
    assert tok.ids == full.ids[:prefix] + full.ids[-(n - prefix):]
    assert tok.labels == full.labels[:prefix] + full.labels[-(n - prefix):]
    assert text.endswith(tok.text) and "".join(tok.text[a:b] for a, b in tok.spans) == tok.text
    start = len(text) - len(tok.text)
    assert [(a + start, b + start) for a, b in tok.spans[prefix:]] == list(full.spans[-(n - prefix):])
    assert ours.tokenize_last(text, 10_000) == (full, 0)


def test_decode_and_continuations(folders):
    for kind in ("byte_level", "metaspace"):
        ours, ref = load_tokenizer(folders[kind]), tc.reference(folders[kind])
        ids = ours.encode("Hello world, the end")
        assert ours.decode(ids) == ref.decode(ids)
        head, tail = ids[:3], ids[3:]
        # Decoding the tail alone would drop SentencePiece's leading space; after the head it keeps it.
        assert ours.decode(head) + decode_after(ours, head, tail) == ours.decode(ids)


def test_parse_token_with_the_models_tokenizer(folders):
    ours = load_tokenizer(folders["metaspace"])
    one = ours.encode(" the", add_special_tokens=False)
    assert len(one) == 1 and parse_token(" the", ours, ours.n_vocab) == one[0]
    assert parse_token("7", ours, ours.n_vocab) == 7
    with pytest.raises(Exception, match="tokens of this model's tokenizer"):
        parse_token("quick brown fox", ours, ours.n_vocab)


def test_vocabulary_size_and_description(folders):
    ms = load_tokenizer(folders["metaspace"])
    ref = tc.reference(folders["metaspace"])
    assert ms.n_vocab == len(ref)
    assert "byte fallback" in ms.describe() and "'<s>'" in ms.describe()
    assert "byte-level" in load_tokenizer(folders["byte_level"]).describe()
    assert ms.document_prefix() == [ms.bos_id]
    assert load_tokenizer(folders["byte_level"]).document_prefix() == [0]  # <|endoftext|>, GPT-2's separator


def test_loaded_once_per_state_of_the_files(folders, tmp_path):
    folder = tc.byte_level(str(tmp_path / "again"))
    first = load_tokenizer(folder)
    assert load_tokenizer(folder) is first
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|endoftext|>", "add_bos_token": True}, f)
    second = load_tokenizer(folder)
    assert second is not first and second.prefix == (0,)
    assert isinstance(second, HFTokenizer)


def test_truncation_and_padding_in_the_file_are_ignored(tmp_path):
    folder = tc.byte_level(str(tmp_path / "trunc"))
    path = os.path.join(folder, "tokenizer.json")
    spec = json.loads(open(path, encoding="utf-8").read())
    spec["truncation"] = {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0}
    spec["padding"] = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                       "pad_type_id": 0, "pad_token": "<|endoftext|>"}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    tok = load_tokenizer(folder).tokenize("the quick brown fox jumps over the lazy dog")
    assert 4 < len(tok.ids) < 64 and "".join(tok.text[a:b] for a, b in tok.spans) == tok.text


def test_which_tokenizer_a_folder_gets(tmp_path):
    from transformer_viewer.model.tokenizers.tokenizer_files import folder_tokenizer

    bare = tmp_path / "bare"
    bare.mkdir()
    own = tc.byte_level(str(tmp_path / "own"))
    # GPT-2's vocabulary (padded or not): GPT-2's tokenizer offline, whatever files sit beside it.
    for vocab in (50257, 50304):
        assert folder_tokenizer(own, {"model_type": "gpt2", "vocab_size": vocab}) == "gpt2"
    # A GPT-2-family model with another vocabulary brings its tokenizer.json, or has only GPT-2's.
    assert folder_tokenizer(own, {"model_type": "gpt2", "vocab_size": 320}) == os.path.abspath(own)
    assert folder_tokenizer(str(bare), {"model_type": "gpt2", "vocab_size": 320}) == "gpt2"
    # Any other family: its folder, whose missing tokenizer.json is then refused with one line.
    assert folder_tokenizer(str(bare), {"model_type": "llama", "vocab_size": 50257}) == os.path.abspath(bare)
    with pytest.raises(Exception, match="tokenizer.json is missing"):
        load_tokenizer(str(bare))


def test_bos_and_eos_are_special_even_when_unmarked(tmp_path):
    folder = tc.metaspace(str(tmp_path / "unmarked"))
    path = os.path.join(folder, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    for token in spec["added_tokens"]:
        token["special"] = False
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    tok = load_tokenizer(folder)
    assert tok.is_special(tok.bos_id) and tok.is_special(tok.eos_id) and not tok.is_special(tok.prefix[0] + 10)
    assert tok.tokenize("hi").special[0]
