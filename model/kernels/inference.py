"""The inference strategy: which kernels a loaded model runs, chosen once and installed explicitly.

The decoder (`model/decoder/gpt.py`) is one plain path, what training and a bare `GPT.forward`
run. `install_inference(model)` puts the faster kernels of the same arithmetic in place on a
model that inference alone will use, by swapping the classes of its modules (parameters,
buffers, hook points and state-dict keys stay as they are; `uninstall()` swaps them back):

- every attention layer becomes a `BlockedAttention`: without autograd, the pattern by blocks
  of `QUERY_BLOCK` query rows over their visible keys (`attention_kernels.py`);
- with the oneDNN GEMM, every `nn.Linear` of the blocks and the head becomes a `Linear` of
  `linear.py` (weights packed once within `packing.py`'s memory bound), and every MLP a
  `FusedMLP` or `FusedGatedMLP` (the activation inside c_fc's product, `mlp_kernels.py`).

What a hook costs and gets on an installed model, layer by layer, decided here and nowhere else:

- `hook_pattern`: the whole (B, nh, T, T) pattern is made for that layer (O(T^2) memory instead
  of one block of rows), by the same blocks, so the numbers are the unhooked path's bit for bit;
  a prediction's last layer, which otherwise computes its last row alone, computes every row.
- `hook_pre` (or a gated MLP's `hook_pre_linear`): that layer's MLP runs the decoder's plain MLP,
  step by step, so the hook sees and may replace the pre-activations; it costs the passes over
  the (T, n_mlp) tensors the fused product saves, and the activation rounds as torch's function
  does (SiLU and tanh-GELU within a float32 ulp or two of the fused path's).
- every other hook point: nothing; the same kernels run with or without it.
- autograd recording (a gradient through an installed model): the decoder's plain path.

The strategy is chosen from what the machine and the model are, never from a timing (noise
would make two runs differ), and stays fixed for the life of the installed model, so captures,
predictions and scans agree exactly; `kernel_path` names it where results are saved. The
environment overrides it: `TV_GEMM=torch` (or the older `TV_ONEDNN=0`) keeps torch's own GEMM,
`TV_GEMM=onednn` asks for oneDNN's wherever this torch build has it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from transformer_viewer.model.decoder.gpt import GPT, MLP, CausalSelfAttention, GatedMLP
from transformer_viewer.model.decoder.hooks import unread
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels import linear as linear_kernel
from transformer_viewer.model.kernels.attention_kernels import (
    QUERY_BLOCK,
    AttentionWorkspace,
    PatternRowsObserver,
    attend_by_blocks,
    attend_rows,
    blocked_pattern,
    values_by_blocks,
)
from transformer_viewer.model.kernels.linear import Linear
from transformer_viewer.model.kernels.mlp_kernels import activated_product, gated_product
from transformer_viewer.model.kernels.packing import pack_for_inference, packing_plan, unpack_all
from transformer_viewer.model.kernels.vocab_blocks import VOCAB_BLOCK

GEMMS = ("onednn", "torch")


@dataclass(frozen=True)
class InferenceStrategy:
    """What an installed model runs. `gemm`: "onednn" (oneDNN's kernel, the MLP's activation
    inside its product) or "torch" (`F.linear`, the step-by-step MLP); `isa`: the instruction
    set torch's CPU kernels dispatch to (`torch.backends.cpu.get_cpu_capability`), or the device
    type off the CPU; `chosen_by`: "cpu" or the environment variable that decided; `packed`:
    which weights oneDNN reads from copies in its own layout (`packing.packing_plan`)."""

    gemm: str
    isa: str
    chosen_by: str = "cpu"
    packed: str = "none"  # the weights kept in oneDNN's layout: "blocks+head", "blocks" or "none"
    query_block: int = QUERY_BLOCK
    vocab_block: int = VOCAB_BLOCK

    @property
    def kernel_path(self) -> str:
        """One line naming the kernels, e.g. "gemm=onednn isa=AVX512 packed=blocks+head
        attention=blocks:128 vocab=blocks:2048 chosen_by=cpu": what an export or a saved
        session records."""
        return (f"gemm={self.gemm} isa={self.isa} packed={self.packed} attention=blocks:{self.query_block} "
                f"vocab=blocks:{self.vocab_block} chosen_by={self.chosen_by}")


def choose_strategy(model: GPT, environ: Mapping[str, str] | None = None) -> InferenceStrategy:
    """The strategy for `model` where its weights are now, from this machine's features.

    oneDNN's GEMM wherever this torch build has it, the weights are float32 on the CPU and the
    environment does not say otherwise: where MKL takes its generic path (every non-Intel CPU,
    AVX2 or AVX-512) it runs these shapes in 0.55-0.85x torch's time, and where MKL runs its own
    kernels (Intel) the two are at parity from about a hundred rows up (BENCHMARKS.md, "The GEMM
    kernel"), so no CPU measured calls for torch's. Off the CPU, or in another dtype, torch's.
    With oneDNN's, the weights are packed as far as the model's shapes fit the memory bound of
    `packing.py`. Blocked attention runs everywhere: it is what bounds a long prompt's memory.
    """
    environ = os.environ if environ is None else environ
    weight = next(model.parameters())
    on_cpu = weight.device.type == "cpu"
    isa = torch.backends.cpu.get_cpu_capability() if on_cpu else weight.device.type
    asked = environ.get("TV_GEMM", "").strip().lower()
    if asked and asked not in GEMMS:
        raise ModelError(f"TV_GEMM={asked!r} is not a GEMM path; use one of {', '.join(GEMMS)}, or unset it")
    if environ.get("TV_ONEDNN", "1") == "0":
        return InferenceStrategy("torch", isa, "TV_ONEDNN")
    # fast_path_enabled: this torch build has the kernel, and it has not refused these inputs.
    usable = on_cpu and weight.dtype == torch.float32 and linear_kernel.fast_path_enabled()
    gemm = "onednn" if (asked or "onednn") == "onednn" and usable else "torch"
    packed = packing_plan(model) if gemm == "onednn" else "none"
    return InferenceStrategy(gemm, isa, "TV_GEMM" if asked else "cpu", packed)


class BlockedAttention(CausalSelfAttention):
    """The decoder's attention computed by blocks of query rows without autograd (module
    docstring: what a hook on `hook_pattern` costs and gets). Installed by `install_inference`."""

    inference: InstalledInference
    layer: int

    def forward(self, x: torch.Tensor, first_row: int = 0) -> torch.Tensor:
        if torch.is_grad_enabled():
            return super().forward(x, first_row)  # autograd records the plain path
        B, T, _ = x.shape
        qh, kh, vh = self.heads_qkv(x)  # (B, nh, T, hs) each
        if not unread(self.hook_pattern):  # someone reads (or edits) the whole pattern: the same blocks, kept whole
            pattern = blocked_pattern(qh, kh, self.window, self.softcap, self.inference.workspace_now())
            z = values_by_blocks(self.hook_pattern(pattern), vh)[:, :, first_row:]  # (B, nh, T - first_row, hs)
        elif first_row:  # these rows alone against their visible keys
            z = attend_rows(qh, kh, vh, first_row, self.window, self.softcap)  # (B, nh, T - first_row, hs)
        else:  # one block of query rows at a time, never the whole pattern
            z = attend_by_blocks(qh, kh, vh, self.window, self.softcap, self.inference.observer(self.layer))
        z = self.hook_z(z.transpose(1, 2))  # (B, T - first_row, nh, hs)
        return self.resid_dropout(self.c_proj(z.reshape(B, T - first_row, self.n_head * self.head_size)))


class FusedMLP(MLP):
    """The MLP with its activation inside c_fc's product (`activated_product`), without autograd
    and where nobody hooks `hook_pre`; else the plain MLP (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        post = None
        if not torch.is_grad_enabled() and unread(self.hook_pre):
            post = activated_product(self.c_fc, x, self.activation)  # None where oneDNN cannot run it
        if post is None:
            return super().forward(x)
        return self.dropout(self.c_proj(self.hook_post(post)))


class FusedGatedMLP(GatedMLP):
    """The gated MLP as two products, act(gate) and up * it (`gated_product`), without autograd
    and where nobody hooks `hook_pre` or `hook_pre_linear`; else the plain one (module docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        post = None
        if not torch.is_grad_enabled() and unread(self.hook_pre, self.hook_pre_linear):
            post = gated_product(self.c_fc, x, self.activation)  # None where oneDNN cannot run it
        if post is None:
            return super().forward(x)
        return self.dropout(self.c_proj(self.hook_post(post)))


_FAST = {CausalSelfAttention: BlockedAttention, MLP: FusedMLP, GatedMLP: FusedGatedMLP}
_PLAIN = {fast: plain for plain, fast in _FAST.items()}


@dataclass(eq=False)
class InstalledInference:
    """The kernels installed on one model: its strategy, the bytes of weights it keeps packed,
    the attention workspace and pattern-row observers its runs lend it. One per model."""

    model: GPT
    strategy: InferenceStrategy
    packed_bytes: int = 0
    _workspace: AttentionWorkspace = field(default_factory=AttentionWorkspace)
    _scratch: bool = False
    _observers: dict[int, PatternRowsObserver] = field(default_factory=dict)

    @property
    def kernel_path(self) -> str:
        return self.strategy.kernel_path

    def observer(self, layer: int) -> PatternRowsObserver | None:
        return self._observers.get(layer)

    def workspace_now(self) -> AttentionWorkspace | None:
        return self._workspace if self._scratch else None

    @contextlib.contextmanager
    def observing(self, observers: Mapping[int, PatternRowsObserver]) -> Iterator[None]:
        """Call `observers[layer](first_row, rows)` with each block of pattern rows, (B, nh, r, b),
        as an unhooked layer's attention computes it, so a summary is built without the whole
        pattern (a layer whose `hook_pattern` is hooked hands the whole pattern to its hook instead)."""
        before = self._observers
        self._observers = {**before, **observers}
        try:
            yield
        finally:
            self._observers = before

    @contextlib.contextmanager
    def scratch_patterns(self) -> Iterator[None]:
        """Let every layer whose pattern is read build it in one workspace shared by all layers
        (a fresh (B, nh, T, T) tensor per layer costs more in page faults than the product that
        fills it). Only for a caller whose hooks copy each pattern out at once: the next layer
        overwrites it."""
        before = self._scratch
        self._scratch = True
        try:
            yield
        finally:
            self._scratch = before

    def repack(self) -> int:
        """Pack the weights again where they are now (after the model moved device); the bytes packed."""
        self.packed_bytes = pack_for_inference(self.model) if self.strategy.packed != "none" else 0
        return self.packed_bytes

    def uninstall(self) -> None:
        """The decoder's plain modules again, packed copies dropped."""
        unpack_all(self.model)
        for module in self.model.modules():
            plain = _PLAIN.get(type(module))
            if plain is not None:
                module.__class__ = plain
                for name in ("inference", "layer"):
                    module.__dict__.pop(name, None)
            elif type(module) is Linear:
                module.__class__ = nn.Linear
                for name in ("pack_rows", "_packed", "_packed_at", "_block_rows"):
                    module.__dict__.pop(name, None)
        if getattr(self.model, "inference", None) is self:
            del self.model.inference


def fuse_mlp(mlp: MLP | GatedMLP) -> FusedMLP | FusedGatedMLP:
    """`mlp` (the same module) with its activation inside c_fc's product on oneDNN's GEMM: its
    linear layers become `Linear`s, a gated MLP's c_fc packed by its gate and up halves."""
    for m in (mlp.c_fc, mlp.c_proj):
        if type(m) is nn.Linear:
            m.__class__ = Linear
    if isinstance(mlp, GatedMLP):
        mlp.c_fc.pack_rows = mlp.n_mlp  # the fused path reads the gate and up halves apart
    mlp.__class__ = _FAST[_PLAIN.get(type(mlp), type(mlp))]
    return mlp


def kernel_path_of(model: GPT) -> str:
    """The kernel path `model` runs: its installed strategy's, else the one a session would install."""
    installed = installed_inference(model)
    return (installed.strategy if installed is not None else choose_strategy(model)).kernel_path


def installed_inference(model: nn.Module) -> InstalledInference | None:
    """The kernels installed on `model`, or None where it runs the decoder's plain path."""
    return getattr(model, "inference", None)


def install_inference(model: GPT, strategy: InferenceStrategy | None = None) -> InstalledInference:
    """Install `strategy` (by default `choose_strategy(model)`) on a model that inference alone
    will use, once: a model that already runs that strategy keeps it as it is (its packed
    copies too); one that runs another is uninstalled first. Returns what `uninstall()`s it."""
    strategy = choose_strategy(model) if strategy is None else strategy
    current = installed_inference(model)
    if current is not None:
        if current.strategy == strategy:
            return current
        current.uninstall()
    installed = InstalledInference(model, strategy)
    for layer, block in enumerate(model.blocks):
        block.attn.__class__ = BlockedAttention
        block.attn.inference, block.attn.layer = installed, layer
    if strategy.gemm == "onednn":
        for block in model.blocks:
            fuse_mlp(block.mlp)
        for m in [*model.blocks.modules(), model.lm_head]:
            if type(m) is nn.Linear:
                m.__class__ = Linear
        installed.repack()
    model.inference = installed  # a plain attribute (not a module): no state-dict entry
    return installed
