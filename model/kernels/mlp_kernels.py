"""The MLP's speed path, beside the decoder so `gpt.py` reads as the plain MLP.

Without autograd on the CPU, the activation runs inside c_fc's product (oneDNN applies it to
each tile as it writes it), and a gated MLP's act(gate) * up is two products: the gate's with
its activation, then the up projection's, multiplied by the gate as it is written. That saves
the passes over (T, n_mlp) tensors the step-by-step MLP makes (the split, the activation, the
product): about 3% of a SmolLM2-shaped forward. It applies only where nobody reads the
pre-activations (`hook_pre`, `hook_pre_linear`): a hook there gets the step-by-step path and
sees its values. The numbers are those of the step-by-step path within the activation's
rounding (SiLU and tanh-GELU round their own way, by a float32 ulp or two; the product with
the gate is exact), and every path that runs the MLP unread (capture, prediction, a layer's
activations recomputed on demand) runs this one, so they agree with each other exactly.
"""

from __future__ import annotations

import torch

from transformer_viewer.model.kernels.linear import Linear


def activated_product(c_fc: Linear, x: torch.Tensor, activation: str) -> torch.Tensor | None:
    """act(c_fc(x)) with the activation inside the product, or None where that path does not
    apply. Only for a caller whose pre-activations nobody reads: they are never made here."""
    return c_fc.epilogue(x, 0, c_fc.out_features, activation)


def gated_product(c_fc: Linear, x: torch.Tensor, activation: str) -> torch.Tensor | None:
    """act(x W_gate) * (x W_up) for c_fc = [W_gate; W_up] in two products, or None where that
    path does not apply. c_fc keeps its packed copies by these halves (`GatedMLP`). Only for a
    caller whose gate and up projections nobody reads: they are never made here."""
    n = c_fc.out_features // 2
    gate = c_fc.epilogue(x, 0, n, activation)  # (..., n)
    return None if gate is None else c_fc.epilogue(x, n, 2 * n, times=gate)
