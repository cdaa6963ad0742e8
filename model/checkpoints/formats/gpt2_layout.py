"""The GPT-2 parameter layout that nanoGPT and Hugging Face share, mapped onto ours.

Both name things `transformer.h.{l}.attn.c_attn.weight`, ...; ours drops `transformer.` and
says `blocks` for `h`. Hugging Face stores its four projections as Conv1D, (in, out), where a
Linear wants (out, in); nanoGPT already uses Linear. `attn.bias` / `attn.masked_bias` are the
causal-mask buffers of older code, not weights, and are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch

CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
MASK_BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias")
WRAPPER_PREFIXES = ("_orig_mod.", "module.")  # torch.compile, DataParallel / DDP
_BLOCK = re.compile(r"^h\.(\d+)\.")


def strip_wrappers(key: str) -> str:
    """`_orig_mod.module.x` -> `x`: the prefixes torch.compile and DDP add to every name."""
    changed = True
    while changed:
        changed = False
        for p in WRAPPER_PREFIXES:
            if key.startswith(p):
                key, changed = key[len(p):], True
    return key


def our_name(key: str) -> str:
    """A GPT-2-layout name (wrappers already stripped) in our names; unknown names pass through
    with only the renames, so an unexpected key still reads like the file's own."""
    key = key.removeprefix("transformer.")
    return _BLOCK.sub(r"blocks.\1.", key)


def is_mask_buffer(key: str) -> bool:
    return key.endswith(MASK_BUFFER_SUFFIXES)


def to_ours(state: dict, conv1d: bool) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(state in our names, our name -> the file's name). `conv1d` transposes the four projections."""
    out: dict[str, torch.Tensor] = {}
    names: dict[str, str] = {}
    for file_key, value in state.items():
        key = strip_wrappers(file_key)
        if is_mask_buffer(key):
            continue
        ours = our_name(key)
        if conv1d and ours.endswith(CONV1D_SUFFIXES) and isinstance(value, torch.Tensor) and value.dim() == 2:
            value = value.t().contiguous()  # Conv1D (in, out) -> Linear (out, in)
        out[ours] = value
        names[ours] = file_key
    return out, names


def file_namer(names: dict[str, str], state_keys) -> Callable[[str], str]:
    """Our name -> the name the file uses (or would use, for a key it lacks)."""
    keys = list(state_keys)
    compiled = any(k.startswith("_orig_mod.") for k in keys)
    prefixed = any(strip_wrappers(k).startswith("transformer.") for k in keys)

    def name(ours: str) -> str:
        if ours in names:
            return names[ours]
        theirs = ours
        if ours != "lm_head.weight":
            theirs = re.sub(r"^blocks\.(\d+)\.", r"h.\1.", ours)
            theirs = ("transformer." + theirs) if prefixed else theirs
        return ("_orig_mod." + theirs) if compiled else theirs
    return name


def tied(state: dict[str, torch.Tensor]) -> bool:
    """Whether the head is the embedding: absent (re-tied on load) or identical to it."""
    head, wte = state.get("lm_head.weight"), state.get("wte.weight")
    if head is None or wte is None:
        return True
    if not isinstance(head, torch.Tensor) or not isinstance(wte, torch.Tensor) or head.shape != wte.shape:
        return False
    return head.data_ptr() == wte.data_ptr() or bool(torch.equal(head, wte))
