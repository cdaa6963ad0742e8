"""Identity modules that name every activation, TransformerLens style.

A forward hook on a HookPoint sees the activation; a hook that returns a tensor replaces it.
That is how capture reads activations and how head masks edit them, without the model code
knowing about either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn


class HookPoint(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


Hook = Callable[[nn.Module, tuple, torch.Tensor], torch.Tensor | None]


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Every HookPoint of a model by its dotted name (`blocks.3.attn.hook_pattern`)."""
    return {name: m for name, m in model.named_modules() if isinstance(m, HookPoint)}


@contextlib.contextmanager
def hooks(model: nn.Module, named_hooks: list[tuple[str, Hook]]) -> Iterator[None]:
    """Register forward hooks by HookPoint name for the duration of the block.

    Handles are always removed, even if the forward raises: hooks are global state on the
    module, and a leaked one would silently edit every later run.
    """
    points = hook_points(model)
    handles = []
    try:
        for name, fn in named_hooks:
            if name not in points:
                raise KeyError(f"no hook point named {name!r}")
            handles.append(points[name].register_forward_hook(fn))
        yield
    finally:
        for h in handles:
            h.remove()


def count_hooks(model: nn.Module) -> int:
    """Forward hooks currently registered anywhere in the model (tests use it to find leaks)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
