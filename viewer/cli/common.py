"""Arguments and helpers that several subcommands share."""

from __future__ import annotations

import argparse

from transformer_viewer.model.errors import ModelError


def add_checkpoint_arguments(parser: argparse.ArgumentParser, positional: bool = False) -> None:
    if positional:
        parser.add_argument("checkpoint", nargs="?", default=None,
                            help="checkpoint file, Hugging Face folder or cached model name (default: the bundled model)")
    else:
        parser.add_argument("--checkpoint", default=None,
                            help="checkpoint file, Hugging Face folder or cached model name (default: the bundled model)")
    parser.add_argument("--n-head", type=int, default=None, help="head count, for tutorial-style state dicts that cannot say")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run (default: auto)")


def load_from_args(args):
    from transformer_viewer.model.checkpoint import load_checkpoint
    from transformer_viewer.model.device import resolve_device

    device = resolve_device(args.device)
    return load_checkpoint(args.checkpoint, device=device, n_head=getattr(args, "n_head", None))


def parse_mask_spec(specs: list[str] | None, n_layer: int, n_head: int):
    """`--mask 3.1 0.*` -> boolean (n_layer, n_head) array; `L.*` masks a whole layer."""
    import numpy as np

    mask = np.zeros((n_layer, n_head), dtype=bool)
    for spec in specs or []:
        try:
            layer_s, head_s = spec.split(".")
            layer = int(layer_s)
            heads = range(n_head) if head_s == "*" else [int(head_s)]
        except ValueError:
            raise ModelError(f"bad --mask {spec!r}: write LAYER.HEAD (0-based), e.g. --mask 3.1, or LAYER.* for a whole layer") from None
        if not 0 <= layer < n_layer:
            raise ModelError(f"--mask {spec}: layer {layer} does not exist; the model has layers 0..{n_layer - 1}")
        for h in heads:
            if not 0 <= h < n_head:
                raise ModelError(f"--mask {spec}: head {h} does not exist; the model has heads 0..{n_head - 1}")
            mask[layer, h] = True
    return mask
