"""Which of a model's weights inference keeps packed in oneDNN's layout (model/kernels/linear.py), and
how much memory that may take.

A packed copy sits beside its weight: it costs the weight's size again. The decoder blocks'
layers gain the most (unpacked, a product of 64 rows spends a tenth of its time copying the
weight into that layout, one of 1,024 rows a few per cent), then the head read a block of the
vocabulary at a time (the log-probability of every position, 5-10% of that pass). A model whose copies
would not fit the bound keeps its memory: the blocks are packed only if they fit, the head
only if it fits with them.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_viewer.model.device import physical_memory
from transformer_viewer.model.kernels.linear import Linear
from transformer_viewer.model.kernels.vocab_blocks import VOCAB_BLOCK

# Packed copies a model may keep: at most 1 GiB, and at most 1/16 of the machine's memory. The
# gain is the same share of a product at any model size; the cost, a second copy of the weights,
# is not, so only small models pay it (GPT-2-small, SmolLM2-135M; not SmolLM2-360M or Qwen2.5-0.5B).
PACK_MAX_BYTES = 1 << 30
PACK_SHARE_OF_MEMORY = 16


def packing_plan(model: nn.Module, max_bytes: int | None = None) -> str:
    """Which copies `pack_for_inference` keeps for this model's shapes within `max_bytes` (the
    same default): "blocks+head", "blocks" or "none". Decided from sizes alone, so a model's
    kernel path is known before anything is packed."""
    if max_bytes is None:
        max_bytes = min(PACK_MAX_BYTES, physical_memory() // PACK_SHARE_OF_MEMORY)
    size = sum(_bytes(m) for m in model.blocks.modules() if isinstance(m, nn.Linear))
    if size == 0 or size > max_bytes or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return "none"
    return "blocks+head" if size + _bytes(model.lm_head) <= max_bytes else "blocks"


def pack_for_inference(model: nn.Module, max_bytes: int | None = None) -> int:
    """Pack the decoder blocks' linear layers, and the head by blocks of the vocabulary, as far
    as their copies fit `max_bytes` (default: PACK_MAX_BYTES and 1/16 of this machine's memory).
    Returns the bytes packed; nothing where the layers are the decoder's own `nn.Linear` (the
    install of oneDNN's GEMM, `inference.install_inference`, makes them `Linear`s and calls
    this). For a model that inference alone will use: a training step changes every weight,
    and each layer would pack itself again."""
    unpack_all(model)
    layers = [m for m in model.blocks.modules() if isinstance(m, Linear)] if hasattr(model, "blocks") else []
    head = getattr(model, "lm_head", None)
    if max_bytes is None:
        max_bytes = min(PACK_MAX_BYTES, physical_memory() // PACK_SHARE_OF_MEMORY)
    size = sum(_bytes(m) for m in layers)
    if not layers or size > max_bytes or not all(m.can_pack() for m in layers):
        return 0
    if not all([m.pack() for m in layers]):
        for m in layers:
            m.unpack()
        return 0
    if isinstance(head, Linear) and size + _bytes(head) <= max_bytes and head.pack(block_rows=VOCAB_BLOCK):
        size += _bytes(head)
    return size


def unpack_all(model: nn.Module) -> None:
    """Drop every packed copy the model keeps (its weights stay as they are)."""
    for m in model.modules():
        if isinstance(m, Linear):
            m.unpack()


def _bytes(m: nn.Linear) -> int:
    return m.weight.numel() * m.weight.element_size()
