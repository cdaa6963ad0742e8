"""Identity modules that name every activation, TransformerLens style.

A forward hook on a HookPoint sees the activation; a hook that returns a tensor replaces it.
That is how capture reads activations and how head masks edit them, without the model code
knowing about either. Each HookPoint knows its dotted name in the model
(`blocks.3.attn.hook_pattern`): `hook_points()` writes it while walking the model, so the
decoder's code only declares the points and never spells their names.

Three ways in, from general to convenient:
- `hooks(model, [(name, hook)])`: raw forward hooks (head masks replace activations this way);
- `reading(model, [(name, fn)])`: call `fn(activation)` as it passes, for code that copies an
  activation straight into its own array;
- `caching(model, names_filter)` / `run_with_cache(model, ids, names_filter)`: keep the selected
  activations in a dict by name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from functools import partial

import torch
from torch import nn
from torch.nn.modules import module as _torch_module


class HookPoint(nn.Module):
    """An identity on one activation; `name` is its dotted path in the model once
    `hook_points()` has walked it or a hook was registered on it by name (None before)."""

    def __init__(self):
        super().__init__()
        self.name: str | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


Hook = Callable[[nn.Module, tuple, torch.Tensor], torch.Tensor | None]
Reader = Callable[[torch.Tensor], None]
# None: every point; a name; a list of names; or a predicate on names.
NamesFilter = str | Iterable[str] | Callable[[str], bool] | None


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Every HookPoint of a model by its dotted name, in module order; names each point.

    The walk of `named_modules` (each module once, parents before children), without its
    nested generators: half the time on a 30-layer model's 970 modules."""
    points: dict[str, HookPoint] = {}
    seen = {id(model)}
    if isinstance(model, HookPoint):
        points[""] = model

    def walk(module: nn.Module, prefix: str) -> None:
        for key, child in module._modules.items():
            if child is None or id(child) in seen:
                continue
            seen.add(id(child))
            name = prefix + key
            if isinstance(child, HookPoint):
                points[name] = child
            walk(child, name + ".")

    walk(model, "")
    for name, point in points.items():
        if point.name != name:  # nn.Module's __setattr__ is slow: a capture walks ~1,000 points
            point.name = name
    return points


def find_hook_point(model: nn.Module, name: str) -> HookPoint:
    """The HookPoint at dotted `name`, found along its path: a few attribute lookups where
    `hook_points` walks the whole model (hundreds of modules, and a capture
    registers hooks in several blocks). An unknown name raises KeyError."""
    point = model
    for atom in name.split(".") if name else ():
        point = point._modules.get(atom)  # children only, as `named_modules` sees them
        if point is None:
            break
    if not isinstance(point, HookPoint):
        raise KeyError(f"no hook point named {name!r}")
    if point.name is None:  # a model no walk has named yet
        point.name = name
    return point


def select_hook_points(model: nn.Module, names_filter: NamesFilter = None) -> list[str]:
    """The names `names_filter` picks, in the model's order for a predicate; an unknown name raises."""
    if names_filter is None or callable(names_filter):
        points = hook_points(model)
        return list(points) if names_filter is None else [name for name in points if names_filter(name)]
    names = [names_filter] if isinstance(names_filter, str) else list(names_filter)
    for name in names:
        find_hook_point(model, name)
    return names


@contextlib.contextmanager
def hooks(model: nn.Module, named_hooks: list[tuple[str, Hook]]) -> Iterator[None]:
    """Register forward hooks by HookPoint name for the duration of the block.

    Hooks on one point run in the order given (and after any registered by an enclosing
    block), each seeing what the previous one returned. Handles are always removed, even if
    the forward raises: hooks are global state on the module, and a leaked one would silently
    edit every later run.
    """
    handles = []
    try:
        for name, fn in named_hooks:
            handles.append(find_hook_point(model, name).register_forward_hook(fn))
        yield
    finally:
        for h in handles:
            h.remove()


def _reader_hook(fn: Reader) -> Hook:
    def hook(_point, _inputs, activation):
        fn(activation)
    return hook


@contextlib.contextmanager
def reading(model: nn.Module, readers: Iterable[tuple[str, Reader]]) -> Iterator[None]:
    """Call `fn(activation)` for each (name, fn) as that activation passes; nothing is replaced."""
    with hooks(model, [(name, _reader_hook(fn)) for name, fn in readers]):
        yield


@contextlib.contextmanager
def caching(model: nn.Module, names_filter: NamesFilter = None) -> Iterator[dict[str, torch.Tensor]]:
    """Keep each selected activation, by hook point name, in the dict this yields.

    The tensors are the activations themselves, not copies: cheap, and safe because the
    forward never edits an activation in place once its hook point has passed it.
    """
    cache: dict[str, torch.Tensor] = {}

    def keep(name: str, _point, _inputs, activation):
        cache[name] = activation

    with hooks(model, [(name, partial(keep, name)) for name in select_hook_points(model, names_filter)]):
        yield cache


def run_with_cache(model: nn.Module, idx: torch.Tensor,
                   names_filter: NamesFilter = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The model's logits for token ids (B, T) and the selected activations by name."""
    with caching(model, names_filter) as cache:
        logits, _ = model(idx)
    return logits, cache


def hooked(point: nn.Module) -> bool:
    """True where a hook of its own reads or replaces this module's activation."""
    return bool(point._forward_hooks or point._forward_pre_hooks)


def unread(*points: nn.Module) -> bool:
    """True where no hook reads or replaces any of these activations: none of their own, and
    none of torch's global module hooks (registered for every module, they expect to see each
    one called). A speed path that skips computing an activation asks this first."""
    if _torch_module._global_forward_hooks or _torch_module._global_forward_pre_hooks:
        return False
    return not any(hooked(p) for p in points)


def count_hooks(model: nn.Module) -> int:
    """Forward hooks currently registered anywhere in the model (tests use it to find leaks)."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
