"""`transformer-viewer info [CHECKPOINT] [--json]`: what a checkpoint holds (format, config,
parameter count, tokenizer), without running it. No CHECKPOINT means the bundled model."""

from __future__ import annotations

import argparse
import json
import math

from transformer_viewer.viewer.cli.common import add_checkpoint_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def describe(loaded) -> dict:
    """The JSON-ready facts `info` prints."""
    from transformer_viewer.model.families import family_name, switches

    return {
        "checkpoint": loaded.source,
        "name": loaded.name,
        "format": loaded.format,
        "family": family_name(loaded.config, loaded.training),
        "switches": switches(loaded.config),
        "config": loaded.config.to_dict(),
        "n_params": int(loaded.n_params),
        "tokenizer": loaded.tokenizer.describe(),
        "device": str(loaded.device),
        "training": loaded.training,
    }


def run(args) -> int:
    from transformer_viewer.viewer.cli.common import load_from_args

    facts = describe(load_from_args(args, for_inference=False))
    if args.json:
        print(json.dumps(json_safe(facts), sort_keys=True, allow_nan=False))
    else:
        print(format_text(facts))
    return 0


def json_safe(value, depth: int = 0):
    """`value` as strict JSON allows: NaN and infinities (a loss before the first step, a
    record from a damaged file) become null, anything else unknown its str()."""
    if depth > 32:
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v, depth + 1) for v in value]
    return str(value)


def format_text(facts: dict) -> str:
    c = facts["config"]
    yes = {True: "yes", False: "no"}
    lines = [
        f"checkpoint  {facts['checkpoint']}",
        f"name        {facts['name']}",
        f"format      {facts['format']}",
        f"family      {facts['family']}" + (f": {', '.join(facts['switches'])}" if facts.get("switches") else ""),
        f"model       {c['n_layer']} layers, {c['n_head']} heads, n_embd {c['n_embd']}, n_mlp {c['n_mlp']}, "
        f"context {c['block_size']}, vocab {c['vocab_size']}",
        f"details     activation {c['activation']}, positions {c['positional']}, bias {yes[bool(c['bias'])]}, "
        f"tied head {yes[bool(c['tie_embeddings'])]}, layer-norm eps {c['layer_norm_eps']:g}",
        f"parameters  {facts['n_params']:,} ({_human(facts['n_params'])})",
        f"tokenizer   {facts['tokenizer']}",
    ]
    if c.get("extra"):
        lines.append(f"extra       {json.dumps(c['extra'], sort_keys=True, default=str)}")
    training = {k: v for k, v in (facts.get("training") or {}).items() if isinstance(v, str | int | float | bool)}
    if training:
        lines.append("training    " + ", ".join(f"{k}={_short(v)}" for k, v in sorted(training.items())))
    return "\n".join(lines)


def _human(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
