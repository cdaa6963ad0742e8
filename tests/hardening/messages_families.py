"""Message triggers of the model families: train's family flags, and Hugging Face family
folders we refuse (picked up by test_messages.py)."""

from __future__ import annotations

import torch

from tests.hardening.family_folders import make
from tests.hardening.message_case import Case, raised
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.checkpoints.formats.hf_families import FAMILIES, state_for
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import CheckpointError


def folder_error(c, name: str) -> str:
    folder, _ = make(str(c.tmp), name)
    return raised(lambda: load_checkpoint(folder), CheckpointError)


def not_a_tensor(_c) -> str:
    config = GPTConfig(n_layer=1, n_head=2, n_embd=8, vocab_size=16, block_size=8, positional="rotary",
                       norm="rmsnorm", mlp="gated", activation="silu", bias=False)
    raw = {"model.embed_tokens.weight": [1, 2, 3], "model.norm.weight": torch.ones(8)}
    return raised(lambda: state_for(raw, config, "folder", FAMILIES["LlamaForCausalLM"]), CheckpointError)


def unknown_final_norm(ctx):
    """A model whose final norm was swapped in code (a notebook's experiment) for one the
    attribution has no frozen form of."""
    import torch

    from transformer_viewer.model.analysis.attribution import head_attribution
    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint

    class Halved(torch.nn.Module):  # the notebook's own final "norm"
        def forward(self, x):
            return x / 2

    loaded = load_checkpoint(ctx.ckpt, device="cpu")  # its own copy: the shared one stays as it is
    loaded.model.ln_f = Halved()
    s = Session(loaded)
    s.set_prompt("one two three")
    return raised(lambda: head_attribution(s))


CASES = [
    Case("train --n-kv-head -1", lambda c: c.cli("train", "--data", "x.txt", "--out", "o.safetensors",
                                                 "--n-kv-head", "-1"), "--n-kv-head cannot be negative"),
    Case("HF folder: a switch we cannot compute", lambda c: folder_error(c, "olmo_clip"), "is not supported"),
    Case("HF folder: quantized weights", lambda c: folder_error(c, "quantized_fp8"),
         "the weights are quantized (fp8)"),
    Case("HF folder: a missing tensor", lambda c: folder_error(c, "missing_tensor"), "missing tensors"),
    Case("HF folder: a tensor left over", lambda c: folder_error(c, "extra_tensor"), "unexpected tensors"),
    Case("HF folder: q/k/v that do not stack", lambda c: folder_error(c, "unstackable"), "do not stack"),
    Case("HF state: a value that is not a tensor", not_a_tensor, "not a tensor"),
    Case("attribution through a norm it cannot read", unknown_final_norm, "direct attribution cannot read through a Halved"),
]
