"""Linear layers whose inference runs on oneDNN's GEMM on the CPU.

Where MKL takes its generic path (every non-Intel CPU), torch's default CPU GEMM for
`F.linear` runs these models' float32 shapes slower than oneDNN's
(`torch.ops.mkldnn._linear_pointwise`, the kernel torch.compile's CPU backend uses), most of
all at tens of rows; oneDNN takes the same dense weights, and where MKL
runs its own kernels the two are about as fast (BENCHMARKS.md, "The GEMM kernel"). One vector
(the next-token logits of a prediction or a capture) goes through as a one-row matrix: oneDNN
streams the head through it about twice as fast as torch's matrix-vector product.

Only inference takes that path: while autograd records (training), `F.linear` runs, so its
backward is torch's own. The two kernels sum in different orders (differences ~1e-6 relative);
every inference path of the app goes through here, so capture, predict and scans share one
kernel per product (a product of other rows may still round apart: see `vocab_blocks.row_blocks`).
A model's `nn.Linear` layers become these where `inference.install_inference` chooses oneDNN's
GEMM. `plain_kernels()` switches the fast path off for a block (tests compare against it); so
does TV_ONEDNN=0 in the environment.

Given the weight as torch stores it, oneDNN copies it into its own blocked layout on every
call: a copy of the whole matrix for a product of a few rows (a tenth of its time or more at
tens of rows). `Linear.pack` makes that copy once and keeps it
beside the weight (model/kernels/packing.py says which layers, within what memory). The packed
product is the same kernel on the same numbers: from two rows up its results are the unpacked
ones, bit for bit where measured (a single row rounds its own way, packed or not), and every
path through a layer uses its packed copy alike. A packed copy is checked against its
weight's storage and version counter at each call: a weight moved, reloaded or changed in
place since is packed again (changes made through `.data` bypass the counter: pack again
after them).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


def onednn_in_build() -> bool:
    """True where this torch build has oneDNN's linear kernel."""
    try:
        return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


def _onednn_available() -> bool:
    return os.environ.get("TV_ONEDNN", "1") != "0" and onednn_in_build()


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


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           packed: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, on oneDNN when inference on the CPU allows it (from the
    weight's `packed` copy when one is given)."""
    global _enabled
    if _use_onednn(x, weight):
        try:
            return _onednn_product(x, weight if packed is None else packed, bias)
        except (RuntimeError, TypeError):
            _enabled = False  # a torch build whose kernel refuses these inputs: plain from now on
    return F.linear(x, weight, bias)


def _onednn_product(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, attr: str = "none",
                    algorithm: str = "", times: torch.Tensor | None = None) -> torch.Tensor:
    """oneDNN's x @ w.T + bias with the epilogue `attr` (or, with `times`, multiplied by it).
    One vector (a position's logits) goes as a row, where oneDNN reads the weight twice as fast."""
    one = x.dim() == 1
    if one:
        x, times = x[None], None if times is None else times[None]
    if times is not None:
        out = torch.ops.mkldnn._linear_pointwise.binary(x, times, w, bias, "mul")
    else:
        out = torch.ops.mkldnn._linear_pointwise(x, w, bias, attr, [], algorithm)
    return out[0] if one else out


# The activations oneDNN can apply to each tile of a product as it writes it, as (attr,
# algorithm) of `_linear_pointwise`: the MLP's activation costs no pass of its own over a
# (T, n_mlp) tensor. GELU (erf) and ReLU give torch's bits; SiLU and tanh-GELU round their own
# way (within a float32 ulp or two of torch's functions).
EPILOGUES = {"silu": ("swish", ""), "gelu_tanh": ("gelu", "tanh"), "gelu": ("gelu", "none"), "relu": ("relu", "")}
_epilogues_ok = True  # False once a torch build refused an epilogue: those products run plainly


def linear_epilogue(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, packed: torch.Tensor | None,
                    activation: str | None = None, times: torch.Tensor | None = None) -> torch.Tensor | None:
    """`activation(linear(x, weight, bias))`, or `linear(x, weight, bias) * times` (`times`
    shaped like the output), with the activation or the product applied inside oneDNN's
    product; None where that path does not apply (training, another device or dtype, an
    activation it lacks): the caller then computes it step by step. The product with `times`
    gives the bits of the separate multiplication."""
    global _epilogues_ok
    if not (_epilogues_ok and _use_onednn(x, weight)) or (activation is not None and activation not in EPILOGUES):
        return None
    attr, algorithm = EPILOGUES[activation] if activation is not None else ("none", "")
    try:
        return _onednn_product(x, weight if packed is None else packed, bias, attr, algorithm, times)
    except (RuntimeError, TypeError, AttributeError):
        _epilogues_ok = False
        return None


PACK_ROWS_HINT = 256  # rows oneDNN lays a packed weight out for; 64-1024 rows run as fast from it


def weight_fingerprint(w: torch.Tensor) -> tuple:
    """What tells a cache built from weight `w` that it still holds: moved or reloaded, a weight
    has another pointer (or device, or dtype); changed in place, another version."""
    return w.data_ptr(), w._version, w.dtype, w.device


class Linear(nn.Linear):
    """nn.Linear (same parameters, state-dict keys and hooks) with `linear`'s inference path,
    from copies of the weight in oneDNN's layout once `pack` made them: of the whole weight,
    or of each block of `block_rows` output rows (the head, read a block of the vocabulary at
    a time by `rows`)."""

    _packed: dict[tuple[int, int], torch.Tensor] | None = None  # (first row, end row) -> copy; no state-dict entry
    _packed_at: tuple = ()  # the weight's fingerprint when packed
    _block_rows: int | None = None
    pack_rows: int | None = None  # the blocks of rows `pack` keeps by default (None: the whole weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self._copy(0, self.out_features))

    def rows(self, x: torch.Tensor, r0: int, r1: int) -> torch.Tensor:
        """The outputs r0..r1-1 alone: `forward(x)[..., r0:r1]` without the others."""
        return linear(x, *self._span(r0, r1))

    def epilogue(self, x: torch.Tensor, r0: int, r1: int, activation: str | None = None,
                 times: torch.Tensor | None = None) -> torch.Tensor | None:
        """Outputs r0..r1-1 through `linear_epilogue` (from their packed copy, if kept)."""
        return linear_epilogue(x, *self._span(r0, r1), activation, times)

    def _span(self, r0: int, r1: int) -> tuple:
        """(weight, bias, packed copy or None) of output rows r0..r1-1."""
        return self.weight[r0:r1], None if self.bias is None else self.bias[r0:r1], self._copy(r0, r1)

    def can_pack(self) -> bool:
        w = self.weight
        return (_enabled and w.device.type == "cpu" and w.dtype == torch.float32 and w.numel() > 0
                and not w.is_inference() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))

    def pack(self, block_rows: int | None = None) -> bool:
        """Keep copies of the weight in oneDNN's layout for inference (whole, or by blocks of
        `block_rows` rows, by default the layer's `pack_rows`); False where none can be made."""
        self.unpack()
        block_rows = block_rows or self.pack_rows
        if not self.can_pack():
            return False
        n = self.out_features
        spans = [(0, n)] if block_rows is None else [(r, min(n, r + block_rows)) for r in range(0, n, block_rows)]
        w = self.weight.detach()
        try:
            copies = {(a, b): torch.ops.mkldnn._reorder_linear_weight(w[a:b], PACK_ROWS_HINT) for a, b in spans}
        except (RuntimeError, TypeError, AttributeError):
            return False
        self._packed, self._packed_at, self._block_rows = copies, weight_fingerprint(self.weight), block_rows
        return True

    def unpack(self) -> None:
        self._packed = None

    def __getstate__(self) -> dict:
        # oneDNN's packed tensors cannot be copied or pickled: a copy or a saved module starts unpacked.
        state = dict(super().__getstate__())
        state.pop("_packed", None)
        return state

    def _copy(self, r0: int, r1: int) -> torch.Tensor | None:
        if self._packed is None:
            return None
        if weight_fingerprint(self.weight) != self._packed_at and not self.pack(self._block_rows):
            return None  # out of date, and the weight as it is now cannot be packed
        return self._packed.get((r0, r1))
