"""Tokenizer folders built in the tests with the `tokenizers` trainers: a byte-level BPE (GPT-2's
style) and a SentencePiece-style Metaspace BPE with byte fallback (Llama 2's style), each saved as
tokenizer.json with the side files a Hugging Face folder carries; the prompts every tokenizer is
checked on; and a random GPT-2-architecture model saved beside its own trained tokenizer."""

from __future__ import annotations

import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tests.helpers.models import hf_config, hf_model
from transformer_viewer.model.tokenizers.hf_tokenizer import HFTokenizer

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, hello there, world of words.",
    "It was the best of times, it was the worst of times.",
    "In the beginning was the word, and the word was with the model.",
    "numbers 1 2 3 and 42 and 1024 tokens\tafter a tab",
    "Paris is the capital of France; Rome is the capital of Italy.",
] * 20
# Characters the Metaspace tokenizer never saw: they can only be spelled with byte-fallback pieces.
UNSEEN = "naïve café 🤗\n"
# Prompts every tokenizer is checked on: spaces, tabs and new lines, unseen characters, typed
# special tokens, the empty prompt and one character.
TEXTS = [
    "Hello world, the quick brown fox.",
    "  two spaces, a\ttab and\nnew lines\n\n",
    UNSEEN + " mixed with the word",
    "Paris is the capital of France",
    "<s> typed as text, and </s> too",
    "",
    "x",
]


def byte_level(folder: str, vocab_size: int = 320, config: dict | None = None) -> str:
    """A GPT-2-style byte-level BPE: no BOS, <|endoftext|> as its special token."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(CORPUS, trainer)
    return _save(tk, folder, config if config is not None else
                 {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": False})


def metaspace(folder: str, vocab_size: int = 200, config: dict | None = None, template_bos: bool = True) -> str:
    """A Llama-2-style BPE: Metaspace pre-tokenizer, `<0xNN>` byte-fallback pieces for every byte,
    <unk> <s> </s> special tokens; its post-processor starts each text with <s> (template_bos)."""
    tk = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(content=" ", left=1, right=0)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                  limit_alphabet=60)
    tk.train_from_iterator(CORPUS, trainer)
    # SentencePiece keeps a piece for every byte in the vocabulary itself (not as added tokens).
    spec = json.loads(tk.to_str())
    vocab = spec["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    tk = Tokenizer.from_str(json.dumps(spec))
    if template_bos:
        tk.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                          special_tokens=[("<s>", tk.token_to_id("<s>"))])
    return _save(tk, folder, config if config is not None else
                 {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "add_eos_token": False})


def llama3_style(folder: str) -> str:
    """Byte-level BPE behind a regex Split, in a Sequence (Llama 3's arrangement), whose template
    starts every text with <|begin_of_text|>; tokenizer_config.json says nothing of adding it."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                                   r"|\s*[\r\n]+|\s+(?!\S)|\s+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=330, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(CORPUS, trainer)
    tk.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", tk.token_to_id("<|begin_of_text|>"))])])
    return _save(tk, folder, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"})


def gemma_style(folder: str) -> str:
    """Spaces replaced by ▁ in a normalizer, no pre-tokenizer, byte fallback (Gemma's arrangement),
    <bos> added by the template and by tokenizer_config.json."""
    tk = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tk.normalizer = normalizers.Replace(" ", "▁")
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"],
                                  show_progress=False, limit_alphabet=60)
    tk.train_from_iterator(CORPUS, trainer)
    spec = json.loads(tk.to_str())
    vocab = spec["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    tk = Tokenizer.from_str(json.dumps(spec))
    tk.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                      special_tokens=[("<bos>", tk.token_to_id("<bos>"))])
    return _save(tk, folder, {"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True,
                              "add_eos_token": False})


def nfc_byte_level(folder: str) -> str:
    """Byte-level BPE behind an NFC normalizer (Qwen2's arrangement): offsets map back through it."""
    byte_level(folder)
    path = os.path.join(folder, "tokenizer.json")
    tk = Tokenizer.from_file(path)
    tk.normalizer = normalizers.NFC()
    tk.save(path)
    return folder


def _save(tk: Tokenizer, folder: str, config: dict) -> str:
    os.makedirs(folder, exist_ok=True)
    tk.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return folder


def reference(folder: str):
    """transformers' PreTrainedTokenizerFast on the same files, built with tokenizer_config.json's
    BOS/EOS settings as its arguments (which is how they take effect there)."""
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(folder, "tokenizer_config.json")
    config = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    keys = ("bos_token", "eos_token", "add_bos_token", "add_eos_token")
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"),
                                   **{k: config[k] for k in keys if k in config})


def own_tokenizer_folder(folder: str, kind: str = "metaspace", seed: int = 7) -> str:
    """A random GPT2LMHeadModel sized to the tokenizer trained into the same folder; `kind` names
    one of the tokenizer builders above."""
    globals()[kind](folder)
    n_vocab = HFTokenizer(folder).n_vocab
    hf_model(hf_config(vocab_size=n_vocab, bos_token_id=1, eos_token_id=2), seed=seed).save_pretrained(folder)
    return folder
