"""The tokenizer files of a Hugging Face folder, read as untrusted input.

`tokenizer.json` is the tokenizer itself (read by the `tokenizers` library);
`tokenizer_config.json`, `special_tokens_map.json` and `generation_config.json` say which tokens
are BOS and EOS and whether a BOS starts every text. Every file's size is bounded before it is
read, each must lie in the folder (`folder_files`: no link leading elsewhere), and each
malformed file gives one line naming it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.formats import folder_files, untrusted_json
from transformer_viewer.model.tokenizer import GPT2_PADDED_VOCAB, GPT2_VOCAB

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
GENERATION_CONFIG = "generation_config.json"
SENTENCEPIECE_MODEL = "tokenizer.model"
SIDE_FILES = (TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP, GENERATION_CONFIG)
# The largest published tokenizer.json files (Gemma 3's 262k tokens) are about 33 MB.
MAX_TOKENIZER_JSON = 128 << 20
# tokenizer_config.json's switches we honour -> SpecialTokens' field.
FLAGS = {"add_bos_token": "add_bos", "add_eos_token": "add_eos", "add_prefix_space": "add_prefix_space",
         "legacy": "legacy"}
MAX_SIDE_FILE = 16 << 20  # tokenizer_config.json may list every added token; the others are tiny
# Bytes of tokenizer.json per token of the model's vocabulary, past a floor: published files hold
# 15 (BERT) to 130 (Gemma 3, with its merges and added tokens) bytes per token. The library takes
# ~17 times a file's size in memory and seconds per 10 MB to parse it, so a file far larger than
# its model's vocabulary needs is refused by its size alone.
MAX_BYTES_PER_TOKEN = 256
MIN_TOKENIZER_JSON_LIMIT = 8 << 20


@dataclass(frozen=True)
class SpecialTokens:
    """What the side files say about BOS and EOS. None: the file does not say."""

    bos: str | None = None
    eos: str | None = None
    bos_id: int | None = None  # from generation_config.json, when no token text is given
    eos_id: int | None = None
    add_bos: bool | None = None  # tokenizer_config.json's add_bos_token
    add_eos: bool | None = None  # its add_eos_token
    add_prefix_space: bool | None = None  # its add_prefix_space: a space before the text's first word
    legacy: bool | None = None  # its legacy: a SentencePiece space after each special token too


def folder_tokenizer(folder: str, hf_config: dict) -> str:
    """The tokenizer spec of a Hugging Face folder: the folder itself, whose tokenizer.json is
    loaded with the model; or "gpt2" (read offline through tiktoken) for a GPT-2-family model
    with GPT-2's vocabulary, or one that brings no tokenizer.json (GPT-2's is then the only
    candidate, and a prompt with ids past its vocabulary is refused when it is set)."""
    vocab = hf_config.get("vocab_size", GPT2_VOCAB)
    if hf_config.get("model_type") == "gpt2":
        gpt2_vocab = isinstance(vocab, int) and GPT2_VOCAB <= vocab <= GPT2_PADDED_VOCAB
        if gpt2_vocab or not os.path.isfile(os.path.join(folder, TOKENIZER_JSON)):
            return "gpt2"
    return os.path.abspath(folder)


def read_text(path: str, limit: int, what: str) -> str:
    """The UTF-8 text of `path`, refused when it is larger than `limit` bytes."""
    try:
        size = os.path.getsize(path)
        if size > limit:
            raise CheckpointError(f"{path}: {size} bytes, more than the {limit >> 20} MiB a {what} may have; "
                                  f"restore the model's own {os.path.basename(path)}")
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except PermissionError:
        raise CheckpointError(f"{path}: permission denied; make it readable and retry") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e}); check the folder") from None
    try:
        return data[:limit].decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not UTF-8 text; restore the model's own {os.path.basename(path)}") from None


def tokenizer_size_limit(vocab_size: int | None) -> int:
    """The most bytes a tokenizer.json may have for a model of `vocab_size` tokens (None: unknown)."""
    if not isinstance(vocab_size, int) or vocab_size <= 0:
        return MAX_TOKENIZER_JSON
    return min(MAX_TOKENIZER_JSON, max(MIN_TOKENIZER_JSON_LIMIT, vocab_size * MAX_BYTES_PER_TOKEN))


def check_tokenizer_size(path: str, vocab_size: int | None) -> None:
    """Refuse, before it is parsed, a tokenizer.json larger than a vocabulary of `vocab_size` needs."""
    limit = tokenizer_size_limit(vocab_size)
    try:
        size = os.stat(path).st_size
    except OSError:
        return  # reading it says what is wrong
    if size > limit:
        per = f" for a model of {vocab_size:,} tokens" if limit < MAX_TOKENIZER_JSON else ""
        raise CheckpointError(f"{path}: {size:,} bytes, more than the {limit >> 20} MiB a tokenizer.json may have"
                              f"{per}; restore the model's own tokenizer.json")


def read_json_object(path: str, what: str) -> dict:
    """A side file's JSON object, parsed with the bounds every checkpoint JSON gets (size, nesting,
    numbers)."""
    return untrusted_json.read_object(path, f"restore the model's own {what}", max_bytes=MAX_SIDE_FILE)


def tokenizer_json_path(folder: str, vocab_size: int | None = None) -> str:
    """The folder's tokenizer.json; a folder without one is refused, saying why GPT-2's would not do."""
    path = os.path.join(folder, TOKENIZER_JSON)
    if os.path.isfile(path):
        return folder_files.check_inside(folder, path)
    vocab = f" ({vocab_size} tokens)" if vocab_size else ""
    why = (f"the model's vocabulary{vocab} is its own, so GPT-2's tokenizer would feed it the wrong ids")
    if os.path.isfile(os.path.join(folder, SENTENCEPIECE_MODEL)):
        raise CheckpointError(f"{folder}: has tokenizer.model but no tokenizer.json, and {why}; convert it once with "
                              "transformers (AutoTokenizer.from_pretrained(folder).save_pretrained(folder))")
    raise CheckpointError(f"{folder}: tokenizer.json is missing, and {why}; copy the model's tokenizer.json "
                          "into the folder")


def read_special_tokens(folder: str) -> SpecialTokens:
    """BOS/EOS from tokenizer_config.json, then special_tokens_map.json, then generation_config.json."""
    found: dict = {}
    config_path = os.path.join(folder, TOKENIZER_CONFIG)
    for name in (TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        data = read_json_object(folder_files.check_inside(folder, path), name)
        for key in ("bos", "eos"):
            if f"{key}_token" in data:  # checked in every file, used from the first that names it
                found.setdefault(key, _token_text(data[f"{key}_token"], path, f"{key}_token"))
        if path == config_path:
            for key, ours in FLAGS.items():
                if key in data and data[key] is not None:
                    if not isinstance(data[key], bool):
                        raise CheckpointError(f"{path}: {key} is {_short_repr(data[key])}, not true or false; "
                                              "restore the model's own tokenizer_config.json")
                    found[ours] = data[key]
    path = os.path.join(folder, GENERATION_CONFIG)
    if os.path.isfile(path):
        data = read_json_object(folder_files.check_inside(folder, path), GENERATION_CONFIG)
        for key in ("bos", "eos"):
            value = data.get(f"{key}_token_id")
            if isinstance(value, list):  # several EOS ids: the first is the one a text ends with
                value = value[0] if value else None
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                found[f"{key}_id"] = value
    return SpecialTokens(**found)


def _short_repr(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _token_text(value, path: str, key: str) -> str | None:
    """A special token as the files spell it: a string, null, or {"content": ...} (older files)."""
    if isinstance(value, dict):
        value = value.get("content")
    if value is None or isinstance(value, str):
        return value
    raise CheckpointError(f"{path}: {key} is {type(value).__name__}, not a token string; "
                          f"restore the model's own {os.path.basename(path)}")
