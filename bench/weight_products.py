"""The weight products of a forward alone, ours and Hugging Face's, on random rows of the
prompt's length: what the capture's ratio to Hugging Face's forward is made of.

Both tools multiply the same matrices, ours on oneDNN from packed copies, theirs on torch's
default GEMM (MKL on x86), so these products are most of either side's time and a floor under
it. Subtracting them leaves "everything else": attention's products, norms, rotary, the
capture's readers and the log-sum-exp on our side; attention, norms, rotary and the copies of
attentions and hidden states on theirs. Our gated MLP's two halves run here as one stacked
product (the same multiplications; the capture runs them as two with the activation fused).
"""

from __future__ import annotations

import torch
from torch import nn


def ours(model, T: int, n_vocab: int):
    """A callable running every weight product of our decoder and head on T rows: the blocks'
    layers as the capture calls them, the head by the vocabulary blocks of the log-probabilities."""
    from transformer_viewer.model.capture.unembedding import VOCAB_BLOCK
    from transformer_viewer.model.kernels.linear import Linear

    layers = [m for m in model.blocks.modules() if isinstance(m, Linear)]
    rows = _rows(T, {m.in_features for m in layers} | {model.lm_head.in_features})
    head, h = model.lm_head, rows[model.lm_head.in_features][0]  # (T, C)

    def run():
        with torch.inference_mode():
            for m in layers:
                m(rows[m.in_features])
            for v0 in range(0, n_vocab, VOCAB_BLOCK):
                head.rows(h, v0, min(n_vocab, v0 + VOCAB_BLOCK))

    return run


def theirs(hf, T: int):
    """A callable running every nn.Linear of a Hugging Face causal LM (its head included) on T rows."""
    layers = [m for m in hf.modules() if isinstance(m, nn.Linear)]
    rows = _rows(T, {m.in_features for m in layers})

    def run():
        with torch.inference_mode():
            for m in layers:
                m(rows[m.in_features])

    return run


def _rows(T: int, widths: set[int]) -> dict[int, torch.Tensor]:
    """One random (1, T, width) input per input width, seeded."""
    g = torch.Generator().manual_seed(T)
    return {w: torch.randn(1, T, w, generator=g) for w in sorted(widths)}
