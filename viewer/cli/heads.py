"""`transformer-viewer heads`: score every attention head (previous-token, first-token,
induction, duplicate-token, entropy) on the model's own forward passes; a table or JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import add_checkpoint_arguments

# Column titles, in the order of transformer_viewer.model.analysis.heads.SCORES (kept here so that
# `--help` does not import torch).
COLUMNS = {
    "previous_token": "prev-token",
    "first_token": "first-token",
    "induction": "induction",
    "duplicate_token": "dup-token",
    "entropy": "entropy",
}
MAX_TEXT_BYTES = 16 * 2**20  # the scores read a few thousand positions; bound what a file makes us hold
# "sink" names the first-token score too: attention that parks on the first token is what the
# literature calls an attention sink.
SORT_CHOICES = ["layer", "previous-token", "first-token", "sink", "induction", "duplicate-token", "entropy"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--sort", default="layer", choices=SORT_CHOICES,
                   help="order the heads by this score, highest first; sink is the first-token score (default: layer, head)")
    p.add_argument("--ascending", action="store_true", help="lowest first (e.g. --sort entropy --ascending)")
    p.add_argument("--top", type=int, default=None, metavar="N", help="show only the first N heads")
    p.add_argument("--text", default=None, metavar="FILE",
                   help="natural text for the text-based scores, one passage per paragraph (default: built-in snippets)")
    p.add_argument("--length", type=int, default=None, metavar="N",
                   help="length of the random sequence that is repeated for the induction scores (default: up to 64)")
    p.add_argument("--batch", type=int, default=4, help="how many random repeated sequences (default: 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random sequences (default: 0)")


def _read_passages(path: str) -> list[str]:
    from transformer_viewer.model.files.text_file import decode_text, read_text_file

    raw = read_text_file(path, MAX_TEXT_BYTES, "head scores need", f"give at most {MAX_TEXT_BYTES // 2**20} MB")
    passages = [p.strip() for p in decode_text(raw, path, "passages").split("\n\n")]
    passages = [p for p in passages if p]
    if not passages:
        raise ModelError(f"{path}: the text file is empty; give it some natural text")
    from transformer_viewer.model.analysis.heads import check_passages

    check_passages(len(passages))  # before any is tokenized
    return passages


def run(args) -> int:
    from transformer_viewer.model.analysis.heads import SCORES, detect_heads
    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.model.checkpoints.checkpoint import bundled_checkpoint_path
    from transformer_viewer.viewer.cli.common import TerminalBar, load_from_args, refuse_non_finite

    if args.top is not None and args.top < 1:
        raise ModelError(f"--top must be at least 1, got {args.top}")
    if args.batch < 1:
        raise ModelError(f"--batch must be at least 1, got {args.batch}")
    if args.length is not None and args.length < 1:
        raise ModelError(f"--length must be at least 1, got {args.length}")
    if args.checkpoint is None and not os.path.exists(bundled_checkpoint_path()):
        raise ModelError("the bundled model is not installed; pass --checkpoint FILE")
    texts = _read_passages(args.text) if args.text else None
    loaded = load_from_args(args)
    with TerminalBar("pass", after_s=0.5) as bar:  # one forward per passage, then the repeated sequences
        scores = detect_heads(Session(loaded), texts=texts, induction_length=args.length,
                              induction_batch=args.batch, seed=args.seed,
                              progress=(lambda done, total: bar.update(done, total, "scoring heads"))
                              if bar.enabled else None)
    refuse_non_finite("head scores", *(scores.score(k) for k in COLUMNS))
    rows = scores.rows(sort=args.sort, descending=not args.ascending, top=args.top)
    if args.json:
        doc = {"model": loaded.name, "source": loaded.source, "n_layer": loaded.config.n_layer,
               "n_head": loaded.config.n_head, "descriptions": dict(SCORES), **scores.to_dict(),
               "sort": args.sort, "top": args.top, "heads": rows}
        if args.top is not None:
            del doc["scores"]  # every head's matrix would undo --top; the rows carry the shown heads' scores
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(f"{loaded.name}: {loaded.config.n_layer} layers x {loaded.config.n_head} heads; "
          f"text scores over {scores.text_positions} positions of natural text, induction on "
          f"{scores.induction_batch} random sequences of {scores.induction_length} tokens seen twice (seed {scores.seed})")
    print(format_table(rows))
    best = [(COLUMNS[k], *scores.best(k)) for k in ("previous_token", "first_token", "induction", "duplicate_token")]
    print("highest: " + ", ".join(f"{title} L{layer}H{head} = {value:.2f}" for title, layer, head, value in best))
    return 0


def format_table(rows: list[dict]) -> str:
    widths = {k: max(len(title), 6) for k, title in COLUMNS.items()}
    head = f"{'layer':>5} {'head':>4}  " + "  ".join(f"{COLUMNS[k]:>{widths[k]}}" for k in COLUMNS)
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = "  ".join(f"{r[k]:>{widths[k]}.3f}" for k in COLUMNS)
        lines.append(f"{r['layer']:>5} {r['head']:>4}  {cells}")
    return "\n".join(lines)
