"""`transformer-viewer info [CHECKPOINT] [--json]`: what a checkpoint holds (format, config,
parameter count, tokenizer) and the kernels it would run on here (`kernel_path`), without running it. No CHECKPOINT means the bundled model.

`training` is what a training run recorded (its files named by their file names); `read` is
what the format reader noted about a file it did not train (a Hugging Face config's
architectures, an activation it had to assume)."""

from __future__ import annotations

import argparse
import json
import shlex

from transformer_viewer.viewer.cli.common import add_checkpoint_arguments, json_safe


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


# What a format reader notes in a checkpoint's record while reading a file that was not trained
# here (a Hugging Face folder, a tutorial state dict): how it was read, not how it was trained.
# `source_format` and `family` repeat the format and family lines and are not shown again.
READER_NOTES = ("source_format", "family", "architectures", "assumed_activation")


def describe(loaded) -> dict:
    """The JSON-ready facts `info` prints."""
    from transformer_viewer.model.decoder.families import family_name, switches
    from transformer_viewer.model.kernels.inference import choose_strategy

    record = dict(loaded.training or {}) if isinstance(loaded.training, dict) else {}
    read = {k: record.pop(k) for k in READER_NOTES if k in record}
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
        "kernel_path": choose_strategy(loaded.model).kernel_path,  # the kernels a session would install
        "read": {k: v for k, v in read.items() if k in ("architectures", "assumed_activation")},
        "training": without_training_paths(record),
    }


def file_name(path: str) -> str:
    """The last part of a path written on any system (`/data/kjv.txt`, `C:\\data\\kjv.txt`)."""
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or path


def without_training_paths(record: dict) -> dict:
    """The training record with every file of its command and data named by its file name: the
    folders were the training machine's and mean nothing on this one."""
    out = dict(record)
    for key in ("command",):
        if isinstance(out.get(key), list):
            out[key] = [file_name(a) if isinstance(a, str) and not a.startswith("-") and ("/" in a or "\\" in a)
                        else a for a in out[key]]
    if isinstance(out.get("data"), list):
        out["data"] = [{**d, "path": file_name(d["path"])} if isinstance(d, dict) and isinstance(d.get("path"), str)
                       else d for d in out["data"]]
    if isinstance(out.get("resumed"), list):
        out["resumed"] = [without_training_paths(r) if isinstance(r, dict) else r for r in out["resumed"]]
    return out


def run(args) -> int:
    from transformer_viewer.viewer.cli.common import load_from_args

    facts = describe(load_from_args(args, for_inference=False))
    if args.json:
        print(json.dumps(json_safe(facts), sort_keys=True, allow_nan=False))
    else:
        print(format_text(facts))
    return 0


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
        f"kernels     {facts['kernel_path']}",
    ]
    if c.get("extra"):
        lines.append(f"extra       {json.dumps(c['extra'], sort_keys=True, default=str)}")
    read = facts.get("read") or {}
    if read.get("architectures"):
        lines.append(f"class       {', '.join(map(str, read['architectures']))} (config.json's architectures)")
    if read.get("assumed_activation"):
        lines.append(f"assumed     activation {read['assumed_activation']} (the file does not say)")
    record = facts.get("training") or {}
    training = {k: v for k, v in record.items() if isinstance(v, str | int | float | bool)}
    if training:
        lines.append("training    " + ", ".join(f"{k}={_short(v)}" for k, v in sorted(training.items())))
    data = [d for d in record.get("data") or [] if isinstance(d, dict) and "path" in d]
    if data:
        lines.append("trained on  " + ", ".join(
            f"{d['path']}" + (f" ({d['tokens']:,} tokens)" if isinstance(d.get("tokens"), int) else "") for d in data))
    if isinstance(record.get("command"), list) and record["command"]:
        lines.append("command     " + " ".join(shlex.quote(str(a)) for a in record["command"]))
    return "\n".join(lines)


def _human(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
