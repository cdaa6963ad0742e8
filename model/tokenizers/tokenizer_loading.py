"""Which tokenizer a spec names: GPT-2's (tiktoken) or a folder's tokenizer.json (`tokenizers`),
the one place that knows both kinds."""

from __future__ import annotations

import os

from transformer_viewer.model.tokenizers.hf_tokenizer import HFTokenizer
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer, load_folder
from transformer_viewer.model.tokenizers.tokenizer_files import (
    SIDE_FILES,
    check_tokenizer_size,
    tokenizer_json_path,
)


def load_tokenizer(spec: str = "gpt2", vocab_size: int | None = None):
    """The tokenizer a spec names: "gpt2", or a folder holding a tokenizer.json (`vocab_size`: the
    model's, for the message when the file is missing). A folder is read once per state of its
    files, so the worker and the window share one tokenizer (a 256k vocabulary takes a second)."""
    if spec == "gpt2":
        return Tokenizer()
    folder = os.path.abspath(spec)
    path = tokenizer_json_path(folder, vocab_size)  # a missing file is refused before anything is cached
    check_tokenizer_size(path, vocab_size)  # by its size, before the library spends seconds parsing it
    stamp = []
    for name in ("tokenizer.json", *SIDE_FILES):
        try:
            st = os.stat(os.path.join(folder, name))
            stamp.append((name, st.st_size, st.st_mtime_ns))
        except OSError:
            stamp.append((name, None, None))
    return load_folder(HFTokenizer, folder, tuple(stamp))
