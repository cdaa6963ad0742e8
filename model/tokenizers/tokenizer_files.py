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

from transformer_viewer.model.decoder.config import MAX_VOCAB_SIZE
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import folder_files, regular_file, untrusted_json
from transformer_viewer.model.files.file_errors import read_errors
from transformer_viewer.model.tokenizers.tokenizer import GPT2_PADDED_VOCAB, GPT2_VOCAB

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
        if gpt2_vocab or not regular_file.exists(os.path.join(folder, TOKENIZER_JSON)):
            return "gpt2"
    return os.path.abspath(folder)


def read_text(path: str, limit: int, what: str) -> str:
    """The UTF-8 text of `path`, refused when it is larger than `limit` bytes or is no regular file."""
    own = f"restore the model's own {os.path.basename(path)}"
    with read_errors(path, own, "check the folder"), regular_file.open_regular(path) as f:
        size = regular_file.size_of(f)
        if size > limit:
            raise CheckpointError(f"{path}: {size} bytes, more than the {limit >> 20} MiB a {what} may have; {own}")
        data = f.read(limit + 1)
    try:
        return data[:limit].decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not UTF-8 text; {own}") from None


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
    if regular_file.exists(path):  # a pipe or a broken link by that name is read, and refused as what it is
        return folder_files.check_inside(folder, path)
    vocab = f" ({vocab_size} tokens)" if vocab_size else ""
    why = (f"the model's vocabulary{vocab} is its own, so GPT-2's tokenizer would feed it the wrong ids")
    if regular_file.exists(os.path.join(folder, SENTENCEPIECE_MODEL)):
        raise CheckpointError(f"{folder}: has tokenizer.model but no tokenizer.json, and {why}; convert it once with "
                              "transformers (AutoTokenizer.from_pretrained(folder).save_pretrained(folder))")
    raise CheckpointError(f"{folder}: tokenizer.json is missing, and {why}; copy the model's tokenizer.json "
                          "into the folder")


def read_special_tokens(folder: str, n_vocab: int | None = None) -> SpecialTokens:
    """BOS/EOS from tokenizer_config.json, then special_tokens_map.json, then generation_config.json
    (whose ids must lie in the tokenizer's vocabulary of `n_vocab` tokens)."""
    found: dict = {}
    config_path = os.path.join(folder, TOKENIZER_CONFIG)
    for name in (TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP):
        path = os.path.join(folder, name)
        if not regular_file.exists(path):
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
    if regular_file.exists(path):
        data = read_json_object(folder_files.check_inside(folder, path), GENERATION_CONFIG)
        for key in ("bos", "eos"):
            value = token_id(data.get(f"{key}_token_id"), f"{path}: {key}_token_id", n_vocab)
            if value is not None:
                found[f"{key}_id"] = value
    return SpecialTokens(**found)


def token_id(value, where: str, n_vocab: int | None) -> int | None:
    """A special-token id as a config file gives it: null, an integer id in the vocabulary (below
    `n_vocab`, when known), or a list of them (several EOS ids: the first is the one a text ends
    with). Anything else is refused in one line: an id is used as an index, and an integer of 30
    digits overflows every integer type the tokenizer and torch have."""
    ids = value if isinstance(value, list) else [value]
    if not ids or value is None:
        return None
    if len(ids) > 1024 or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise CheckpointError(f"{where} must be a token id (an integer) or a list of them, got "
                              f"{_short_repr(value)}; restore the model's own file")
    limit = MAX_VOCAB_SIZE if n_vocab is None else n_vocab
    bad = next((i for i in ids if not 0 <= i < limit), None)
    if bad is not None:
        shown = str(bad) if abs(bad) < 10 ** 12 else f"an integer of about {int(abs(bad).bit_length() * 0.30103) + 1} digits"
        vocab = (f"any vocabulary this decoder runs (ids 0 to {MAX_VOCAB_SIZE - 1:,})" if n_vocab is None else
                 f"the tokenizer's vocabulary of {n_vocab:,} tokens (ids 0 to {n_vocab - 1:,})")
        raise CheckpointError(f"{where} is {shown}, outside {vocab}; restore the model's own file")
    return ids[0]


def check_config_token_ids(hf: dict, folder: str) -> None:
    """config.json's bos_token_id and eos_token_id (and its text_config's, for a multimodal
    model): null, or ids. Not checked against the model's vocabulary: transformers writes GPT-2's
    ids (50256) into the config of any GPT-2-shaped model whatever its vocabulary, and the decoder
    never reads them; only what could be no id at all is refused."""
    text = hf.get("text_config")
    for where, config in (("config.json", hf), ("config.json text_config", text if isinstance(text, dict) else {})):
        for key in ("bos_token_id", "eos_token_id"):
            token_id(config.get(key), f"{os.path.join(folder, where)}: {key}", None)


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
