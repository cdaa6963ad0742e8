"""Linear layers whose inference runs on oneDNN's GEMM on the CPU.

torch's default CPU GEMM for `F.linear` reaches 50-120 GFLOP/s on this project's 2-core AMD
machine; oneDNN's (`torch.ops.mkldnn._linear_pointwise`, the kernel torch.compile's CPU
backend uses) reaches 130-190 on the same float32 shapes, with the same dense weights and no
copy of them. Measured on GPT-2-small shapes: 0.55-0.85x the time, and 0.4-0.6x for the
768 x 50257 unembedding (bench/). One vector (the next-token logits of a prediction or a
capture) goes through as a one-row matrix: torch's matrix-vector product reads the head at
11-13 GB/s, oneDNN's at 21-23 (GPT-2's head 12.3 -> 6.6 ms; a 151,936 x 896 head 42 -> 23 ms).

Only inference takes that path: while autograd records (training), `F.linear` runs, so its
backward is torch's own. The two kernels sum in different orders (differences ~1e-6 relative);
every inference path of the app goes through here, so capture, predict and scans still agree
with each other exactly. `plain_kernels()` switches the fast path off (tests compare against
it); so does TV_ONEDNN=0 in the environment.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


def _onednn_available() -> bool:
    if os.environ.get("TV_ONEDNN", "1") == "0":
        return False
    try:
        return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


_enabled = _onednn_available()


def fast_path_enabled() -> bool:
    return _enabled


@contextlib.contextmanager
def plain_kernels() -> Iterator[None]:
    """Run every `linear` on `F.linear` inside the block."""
    global _enabled
    before = _enabled
    _enabled = False
    try:
        yield
    finally:
        _enabled = before


def _use_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (_enabled and x.dim() >= 1 and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype == torch.float32 and x.shape[-1] > 0 and weight.shape[0] > 0
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, on oneDNN when inference on the CPU allows it."""
    global _enabled
    if _use_onednn(x, weight):
        try:
            if x.dim() == 1:  # one vector (a position's logits): as a row, where oneDNN reads the weight twice as fast
                return torch.ops.mkldnn._linear_pointwise(x[None], weight, bias, "none", [], "")[0]
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        except (RuntimeError, TypeError):
            _enabled = False  # a torch build whose kernel refuses these inputs: plain from now on
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """nn.Linear (same parameters, state-dict keys and hooks) with `linear`'s inference path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
