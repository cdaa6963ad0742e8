"""`transformer-viewer rollout [CHECKPOINT] --prompt TEXT [--layers A:B] [--heads mean|max|L.H,...]
[--query Q] [--no-residual] [--mask L.H ...] [--sae PATH[@HOOK] ... --clamp SPEC ...]
[--out FILE.npy|.csv|.json]`: attention rollout (Abnar & Zuidema 2020) through a range of layers,
in the run with the heads ablated and the SAE features clamped (a layer's patterns read its
input, which holds every earlier clamp).

With `--query` one row (that query's share of each token); without it every row, computed a
block of rows at a time (the product is never whole in memory; the rows written are (T, T)).
"""

from __future__ import annotations

import argparse
import io
import sys

import numpy as np

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import (
    add_ablation_argument,
    add_checkpoint_arguments,
    add_session_argument,
)
from transformer_viewer.viewer.cli.sae_options import add_clamp_argument, add_sae_argument

MAX_FULL_BYTES = 1 << 30  # every row of an (8192, 8192) float32 rollout is 256 MB; a bigger prompt asks for --query


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    p.add_argument("--prompt", default=None, help="the text to run (or the one a --session ran)")
    add_session_argument(p)
    p.add_argument("--layers", default=None, metavar="A:B", help="the layers A..B-1 rolled out (default: every layer)")
    p.add_argument("--heads", default="mean", help="mean or max over each layer's heads, or the mean of chosen heads "
                                                   "L.H,L.H (a layer with none passes only its residual) (default: mean)")
    p.add_argument("--query", type=int, default=None,
                   help="one query row, 0-based; negative counts from the end (default: every row)")
    p.add_argument("--no-residual", dest="residual", action="store_false",
                   help="leave out the identity for the residual stream (default: (A + I) / 2, rows renormalised)")
    p.add_argument("--mask", nargs="+", action="extend", default=[], metavar="L.H", help="ablate these heads in the run")
    add_ablation_argument(p)
    add_sae_argument(p, required=False)
    add_clamp_argument(p)
    p.add_argument("--out", default=None, help="write the rows to FILE.npy (float32), FILE.csv or FILE.json")


def parse_layers(text: str | None, n_layer: int) -> tuple[int, int]:
    if text is None:
        return 0, n_layer
    try:
        a, b = (int(v) if v.strip() else None for v in text.split(":"))
    except ValueError:
        raise ModelError(f"--layers {text!r}: write A:B, the layers A..B-1 (e.g. 0:6)") from None
    return (0 if a is None else a), (n_layer if b is None else b)


def parse_heads(text: str):
    if text in ("mean", "max"):
        return text
    pairs = []
    for item in text.split(","):
        try:
            layer, head = item.strip().split(".")
            pairs.append((int(layer), int(head)))
        except ValueError:
            raise ModelError(f"--heads {text!r}: use mean, max, or heads L.H,L.H (0-based)") from None
    return pairs


def run(args) -> int:
    from transformer_viewer.viewer.cli.common import (
        TerminalBar,
        check_mask_syntax,
        intervention_from_args,
        session_arguments,
        session_for_prompt,
    )
    from transformer_viewer.viewer.cli.sae_options import attach_saes, check_sae_syntax, clamps_from_args

    session_arguments(args)  # --session: the checkpoint, prompt, mask, SAEs and clamps it saved
    heads = parse_heads(args.heads)
    check_mask_syntax(args.mask)
    check_sae_syntax(args)
    if args.out is not None and not args.out.lower().endswith((".npy", ".csv", ".json")):
        raise ModelError(f"--out {args.out}: the rows are written as .npy, .csv or .json")
    session = session_for_prompt(args)
    attach_saes(args, session)
    from transformer_viewer.model.analysis.rollout import MAX_ROWS, rollout_rows

    c = session.config
    T = len(session.tokens.ids)
    layers = parse_layers(args.layers, c.n_layer)
    intervention = intervention_from_args(args, c, clamps=clamps_from_args(args, T))
    if args.query is not None:
        q = session._position(args.query, T)
        blocks = [(q, q + 1)]
    else:
        if T * T * 4 > MAX_FULL_BYTES:
            raise ModelError(f"every row of a {T}-token rollout is {T * T * 4 / 2**30:.1f} GiB; "
                             f"ask for one row with --query")
        blocks = [(a, min(T, a + MAX_ROWS)) for a in range(0, T, MAX_ROWS)]
    rows = []
    with TerminalBar("row", after_s=0.5) as bar:
        for first, stop in blocks:
            bar.update(first, T, "rollout")
            rows.append(rollout_rows(session, first, stop, layers=layers, heads=heads, residual=args.residual,
                                     intervention=intervention))
    matrix = np.concatenate([r.rows for r in rows])
    label = f"rollout of layers {layers[0]}:{layers[1]}, heads {rows[0].heads}" + (
        "" if args.residual else ", without the residual")
    if args.out is not None:
        write_rows(args.out, matrix, blocks[0][0], session.tokens.labels, label)
    else:
        print(format_text(matrix, blocks[0][0], session.tokens.labels, label))
    return 0


def write_rows(path: str, matrix: np.ndarray, first: int, labels, label: str) -> None:
    from transformer_viewer.viewer.export import write_file

    ext = path.lower().rsplit(".", 1)[-1]
    if ext == "npy":
        buf = io.BytesIO()
        np.save(buf, matrix.astype(np.float32), allow_pickle=False)
        data = buf.getvalue()
    elif ext == "json":
        import json

        data = json.dumps({"what": label, "first_query": first, "tokens": list(labels),
                           "rows": [[float(v) for v in row] for row in matrix]}).encode("utf-8")
    else:
        lines = ["query," + ",".join(str(i) for i in range(matrix.shape[1]))]
        lines += [f"{first + i}," + ",".join(f"{v:.9g}" for v in row) for i, row in enumerate(matrix)]
        data = ("\n".join(lines) + "\n").encode("utf-8")
    print(f"wrote {write_file(path, data)} ({label}; rows from query {first})", file=sys.stderr)


def format_text(matrix: np.ndarray, first: int, labels, label: str, top: int = 10) -> str:
    lines = [label + ":"]
    for i, row in enumerate(matrix[-1:] if len(matrix) > 1 else matrix):
        q = first + (len(matrix) - 1 if len(matrix) > 1 else i)
        lines.append(f"query {q} ({labels[q]!r}) draws on:")
        for k in np.argsort(-row)[:top]:
            if row[k] <= 0:
                break
            lines.append(f"  {k:>5} {labels[k]!r:<16} {row[k]:.4f}")
    return "\n".join(lines)
