"""Load and save checkpoints in every format we know, detected from the file itself.

Every format reader turns its file into (GPTConfig, state dict in our parameter names, info);
this module checks the state against the config (missing/unexpected keys, shapes, dtypes,
non-finite values) and builds the model. Files are untrusted: pickles are read only with
`torch.load(weights_only=True)`, which refuses anything that needs code to rebuild.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from transformer_viewer.model.checkpoints import load_watch
from transformer_viewer.model.checkpoints.bundled import bundled_checkpoint_path
from transformer_viewer.model.checkpoints.expected_state import expected_state, skeleton
from transformer_viewer.model.checkpoints.formats import detect, native, tensor_bounds
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.tokenizers.tokenizer import (
    GPT2_PADDED_VOCAB,
    GPT2_VOCAB,
    TextTokenizer,
    Tokenizer,
)
from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer


@dataclass
class LoadedModel:
    model: GPT
    config: GPTConfig
    format: str  # "native", "nanogpt", "huggingface", "tutorial"
    source: str  # the path or name it came from
    name: str  # short display name
    tokenizer: TextTokenizer = field(default_factory=Tokenizer)  # GPT-2's unless the model brought its own
    training: dict = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        return self.model.n_params

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def load_checkpoint(path_or_name: str | None = None, device: str | torch.device = "cpu",
                    n_head: int | None = None, dtype: torch.dtype = torch.float32,
                    progress: load_watch.Progress | None = None, is_cancelled=None) -> LoadedModel:
    """Load any supported checkpoint (None: the bundled model) onto `device`, in eval mode.

    `progress(done, total, stage)` hears of each tensor read and checked; once `is_cancelled()`
    is true the load stops at the next tensor with `Cancelled` (see load_watch.py)."""

    source = bundled_checkpoint_path() if path_or_name is None else os.fspath(path_or_name)
    if path_or_name is None and not os.path.exists(source):
        raise CheckpointError(f"the bundled model is not installed ({source} is missing); give a checkpoint path")
    with load_watch.watching(progress, is_cancelled):
        fmt, reader = detect.find_reader(source)
        config, state, info = reader(source, n_head=n_head)
        tokenizer = model_tokenizer(info.get("tokenizer", "gpt2"), fmt, source, config)
        check_tokenizer(config, tokenizer, source)
        model = build_model(config, state, source, key_name=info.get("key_name"))
        del state  # what the model did not take (the sources of converted tensors) is freed before any move
        load_watch.check_cancelled()
        model.to(device=device, dtype=dtype)
    name = info.get("name") or _display_name(source)
    return LoadedModel(model=model, config=config, format=fmt, source=source, name=name,
                       tokenizer=tokenizer, training=info.get("training", {}))


def model_tokenizer(spec: str, fmt: str, source: str, config: GPTConfig):
    """The tokenizer a reader's info names: "gpt2", or (Hugging Face folders only) the folder with
    the model's tokenizer.json. A file's own metadata never names a path we would read."""
    if spec == "gpt2":
        return Tokenizer()
    if fmt != "huggingface" or not isinstance(spec, str) or not os.path.isdir(spec):
        raise CheckpointError(f"{source}: the model needs the {spec!r} tokenizer, which a {fmt} checkpoint cannot "
                              "bring along (only GPT-2's is built in; a Hugging Face folder brings its tokenizer.json)")
    return load_tokenizer(spec, config.vocab_size)


def check_tokenizer(config: GPTConfig, tokenizer, source: str) -> None:
    """Every id the tokenizer makes must have an embedding row. GPT-2's own tokenizer also caps
    the rows: past GPT-2's 50257 they are fine up to the next multiple of VOCAB_PADDING (nanoGPT
    pads to 50304; no token id reaches them and the session ignores their logits), but more
    means the model was trained with another tokenizer, whose ids GPT-2's would not produce."""
    if tokenizer.spec == "gpt2":
        if config.vocab_size > GPT2_PADDED_VOCAB:
            raise CheckpointError(f"{source}: vocab_size {config.vocab_size} is larger than GPT-2's tokenizer "
                                  f"({GPT2_VOCAB} tokens, padded at most to {GPT2_PADDED_VOCAB}); the model was "
                                  "trained with another tokenizer: give its Hugging Face folder with tokenizer.json")
        return
    if tokenizer.n_vocab > config.vocab_size:
        raise CheckpointError(f"{source}: its tokenizer.json has {tokenizer.n_vocab} tokens but the model's embedding "
                              f"only {config.vocab_size} rows; the tokenizer belongs to another model, restore this "
                              "model's own tokenizer.json")


def build_model(config: GPTConfig, state: dict[str, torch.Tensor], source: str,
                key_name: Callable[[str], str] | None = None) -> GPT:
    """A GPT with `state` loaded, after checking every key, shape, dtype and value.

    `key_name` maps our parameter names to the file's own, so messages name what the user's
    file calls a tensor. `config.extra["head_bias"]` (tutorial models with a biased head) adds
    a bias to the LM head, which GPT itself never has.
    """
    name = key_name or (lambda k: k)
    expected = expected_state(config)
    if config.tie_embeddings:
        state = {k: v for k, v in state.items() if k != "lm_head.weight"} if "wte.weight" in state else state
    tensor_bounds.check_param_count(source, sum(ref.numel() for ref in expected.values()))
    missing = [name(k) for k in expected if k not in state]
    unexpected = [name(k) for k in state if k not in expected]
    if missing:
        raise CheckpointError(f"{source}: missing keys {_few(missing)}; the file does not hold a complete model")
    if unexpected:
        raise CheckpointError(f"{source}: unexpected keys {_few(unexpected)}; it is not a model of this layout")
    for k, ref in expected.items():
        t = state[k]
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{source}: {name(k)} is not a tensor")
        if tuple(t.shape) != tuple(ref.shape):
            raise CheckpointError(f"{source}: shape mismatch for {name(k)}: expected {tuple(ref.shape)}, found {tuple(t.shape)}")
        if not t.is_floating_point():
            raise CheckpointError(f"{source}: {name(k)} has dtype {str(t.dtype).replace('torch.', '')}; weights must be floating point")
    # Every name and shape is right: now the work proportional to the weights, tensor by tensor.
    weights = {}
    for i, k in enumerate(expected):
        load_watch.tensor_done(load_watch.CHECKING, i, len(expected))  # stops here once cancelled
        # contiguous(): assign=True keeps the tensors themselves, and a transposed view would stay one.
        weights[k] = w = _float32(state[k], f"{source}: {name(k)}").contiguous()
        if not _all_finite(w):
            raise CheckpointError(f"{source}: {name(k)} contains NaN or Inf values; the checkpoint is damaged")
    # Built on the meta device and filled by assignment: no time spent on a random init
    # that would be overwritten at once.
    model = skeleton(config)
    if config.tie_embeddings:
        weights["lm_head.weight"] = weights["wte.weight"]
    model.load_state_dict(weights, strict=True, assign=True)
    if config.tie_embeddings:
        model.lm_head.weight = model.wte.weight  # one Parameter again, as in a fresh model
    return model.eval()


def _float32(t: torch.Tensor, what: str) -> torch.Tensor:
    try:
        return t.to(torch.float32)
    except (NotImplementedError, RuntimeError):
        dtype = str(t.dtype).replace("torch.", "")
        raise CheckpointError(f"{what} has dtype {dtype}, which cannot be converted to float32; "
                              "re-save the weights as float32, float16 or bfloat16") from None


def _all_finite(t: torch.Tensor) -> bool:
    """No NaN and no infinity in a float32 tensor: its minimum and maximum are finite (both
    carry a NaN). One vectorized reduction that reads each weight once, where
    `isfinite(t).all()` writes a boolean per weight first and dominated a large model's load."""
    if t.numel() == 0:
        return True
    lo, hi = torch.aminmax(t)
    return math.isfinite(float(lo)) and math.isfinite(float(hi))


def save_checkpoint(model: GPT, path: str, tokenizer: str = "gpt2", training: dict | None = None,
                    dtype: torch.dtype | None = None) -> None:
    """Write our own format atomically; `dtype` (e.g. torch.float16) shrinks the file."""
    state = model.state_dict()
    if model.config.tie_embeddings:
        state.pop("lm_head.weight", None)  # safetensors refuses shared storage; it is re-tied on load
    if dtype is not None:
        state = {k: v.to(dtype) for k, v in state.items()}
    native.write_native(path, model.config, state, tokenizer=tokenizer, training=training)


def _few(keys: list[str], n: int = 4) -> str:
    shown = ", ".join(keys[:n])
    return shown + (f" (and {len(keys) - n} more)" if len(keys) > n else "")


def _display_name(source: str) -> str:
    base = os.path.basename(os.path.normpath(source))
    return base or source
