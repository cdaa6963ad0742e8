"""Sessions on the tiny random Hugging Face model of each family (tests/helpers/hf_family_models.py),
loaded through our reader, for the analyses that must hold on every family."""

from __future__ import annotations

import numpy as np
import torch

from tests.helpers.hf_family_models import build, save
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import LoadedModel, build_model
from transformer_viewer.model.checkpoints.formats import huggingface
from transformer_viewer.model.tokenizers.tokenizer import Tokenized

# One tiny model per row of the README's family table (GPT-2 is the project's own tiny model).
README_FAMILIES = ("llama", "smollm_tied", "smollm3", "mistral", "ministral3", "qwen2", "qwen3", "qwen2_vl", "gemma",
                   "gemma2", "gemma3", "phi3", "olmo", "olmo2", "olmo3", "pythia", "neox_sequential", "phi", "gptj")


def load_folder(folder) -> LoadedModel:
    """Through the reader and build_model (not the app's tokenizer check: these vocabularies are tiny)."""
    config, state, info = huggingface.read_folder(str(folder))
    model = build_model(config, state, str(folder), key_name=info["key_name"])
    return LoadedModel(model=model, config=config, format="huggingface", source=str(folder), name=info["name"],
                       training=info["training"])


def session_on(loaded: LoadedModel, ids) -> Session:
    """A session whose prompt is the token ids (1, T) as they are, labelled t0, t1, ..."""
    s = Session(loaded, pattern_dtype=np.float32, keep_full=True)
    ids = [int(i) for i in torch.as_tensor(ids).reshape(-1)]
    n = len(ids)
    s.set_tokens(Tokenized(ids=tuple(ids), labels=tuple(f"t{i}" for i in range(n)),
                           spans=tuple((i, i + 1) for i in range(n)), text="x" * n))
    return s


def family_session(name: str, folder, T: int = 12, seed: int = 7) -> Session:
    """The tiny `name` model saved into `folder`, loaded, with T random token ids as its prompt."""
    hf = build(name, seed=seed)
    vocab = hf.config.get_text_config().vocab_size
    ids = torch.randint(3, vocab, (1, T), generator=torch.Generator().manual_seed(seed + 1))
    return session_on(load_folder(save(hf, str(folder))), ids)


def assert_logits_and_patterns_match(hf, loaded: LoadedModel, ids: torch.Tensor) -> None:
    """Our logits within 1e-4 of Hugging Face's and every captured pattern within 1e-5 of its eager one."""
    with torch.no_grad():
        out = hf(ids, output_attentions=True)
        ours = loaded.model(ids)[0]
    assert (ours - out.logits).abs().max().item() <= 1e-4
    trace = session_on(loaded, ids).run()
    for layer in range(loaded.config.n_layer):
        assert np.abs(trace.attention[layer] - out.attentions[layer][0].numpy()).max() <= 1e-5, layer
