"""`transformer-viewer patch [CHECKPOINT] --clean TEXT --corrupted TEXT [--metric logit-diff|logprob|kl]
[--tokens A [B]] [--position P] [--direction denoise|noise] [--what WHAT] [--layer L]
[--receiver L.H --input q|k|v] [--estimate] [--pairs FILE] [--mask L.H ...] [--ablation zero|mean]
[--sae PATH[@HOOK] ... --clamp [SAE:]FEATURE=VALUE|xSCALE[@POSITION] ...] [--session FILE]
[--json | --out FILE.npy|.csv|.png|.svg|.pdf]`: activation patching between a clean and a
corrupted prompt, every cell of one grid.

The head mask and the feature clamps apply to both prompts' runs and every patched run alike; a
clamp's position is a token position of the clean prompt (negative: from its end), and applies
to the corrupted prompt where it has that position. `--session` brings its SAEs and clamps as
`predict` does.

Default tokens: for logit-diff, the clean run's top prediction against the corrupted run's; for
logprob, the clean run's top prediction. `--json` prints both prompts, the model, the metric's
clean and corrupted values and, per cell, the raw and the normalised value (corrupted = 0,
clean = 1) with the axes labelled, the head mask and the clamps (`"clamps"`: each as `--clamp`
spells it). `.npy`/`.csv` hold the raw values, with a `.json` sidecar
saying everything else; figures are drawn by the window's patching view.
"""

from __future__ import annotations

import argparse
import os
import sys

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import (
    TerminalBar,
    add_ablation_argument,
    add_checkpoint_arguments,
    add_session_argument,
    add_token_pair_argument,
    session_arguments,
)
from transformer_viewer.viewer.cli.sae_options import add_clamp_argument, add_sae_argument

DATA_SUFFIXES = (".npy", ".csv")
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
INPUTS = ("q", "k", "v")
TABLE_CELLS = 12  # cells the text output lists, largest effect first


def add_arguments(p: argparse.ArgumentParser) -> None:
    from transformer_viewer.model.analysis.patching.grid import DIRECTIONS, WHAT_HELP
    from transformer_viewer.model.analysis.patching.metric import METRICS

    add_checkpoint_arguments(p)
    add_session_argument(p)
    p.add_argument("--clean", default=None, help="the clean prompt (its answer is the one patches restore)")
    p.add_argument("--corrupted", default=None, help="the corrupted prompt (e.g. the clean one with the names swapped)")
    p.add_argument("--metric", default=METRICS[0], choices=METRICS,
                   help="what each run is measured by: logit-diff (A - B), logprob (log p(A)) or kl (from the clean "
                        "run's distribution) (default: logit-diff)")
    add_token_pair_argument(p, "the metric's tokens (default: the clean run's top prediction, and for logit-diff "
                               "the corrupted run's top prediction as B)")
    p.add_argument("--position", type=int, default=None,
                   help="the position whose prediction is measured, 0-based; negative counts from the end (default: last)")
    p.add_argument("--direction", default=DIRECTIONS[0], choices=DIRECTIONS,
                   help="denoise: clean values into the corrupted run; noise: corrupted into clean (default: denoise)")
    p.add_argument("--what", default="resid", choices=tuple(WHAT_HELP),
                   help="what is patched: " + "; ".join(f"{k}: {v}" for k, v in WHAT_HELP.items()) + " (default: resid)")
    p.add_argument("--layer", type=int, default=None, help="the layer whose heads heads-by-pos patches by position")
    p.add_argument("--receiver", default=None, metavar="L.H", help="path patching's receiver head (with --what path)")
    p.add_argument("--input", default=None, choices=INPUTS, help="the receiver's input path patching writes into")
    p.add_argument("--estimate", action="store_true",
                   help="attribution patching: a first-order estimate of every cell from one forward and backward")
    p.add_argument("--pairs", default=None, metavar="FILE",
                   help="a file of prompt pairs, one CLEAN<TAB>CORRUPTED a line, whose results are averaged "
                        "(instead of --clean and --corrupted)")
    p.add_argument("--mask", nargs="+", action="extend", default=[], metavar="L.H",
                   help="heads ablated in both runs and every patched run, e.g. 3.1 or 0.*")
    add_ablation_argument(p)
    add_sae_argument(p, required=False)
    add_clamp_argument(p)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the result as one JSON object")
    out.add_argument("--out", default=None, help="write the grid to FILE.npy or FILE.csv (raw values, with a "
                                                 "FILE.json sidecar) or draw it to FILE.png, .svg or .pdf")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def check_arguments(args) -> None:
    """Say any mistake in the arguments before a model loads."""
    from transformer_viewer.model.capture.prompts import parse_layer_head
    from transformer_viewer.viewer.cli.common import check_mask_syntax

    if args.pairs is not None and (args.clean is not None or args.corrupted is not None):
        raise ModelError("give --clean and --corrupted, or --pairs FILE, not both")
    if args.pairs is None and (args.clean is None or args.corrupted is None):
        raise ModelError("give the two prompts: --clean TEXT --corrupted TEXT (or --pairs FILE of tab-separated pairs)")
    if args.out is not None:
        from transformer_viewer.viewer.export_files import check_writable

        if not args.out.lower().endswith(DATA_SUFFIXES + FIGURE_SUFFIXES):
            raise ModelError(f"--out {args.out}: a patching grid is written as .npy or .csv (data) or .png, .svg "
                             "or .pdf")
        check_writable(args.out)  # before minutes of patched runs
    if args.what == "path":
        if args.receiver is None or args.input is None:
            raise ModelError("--what path needs the receiver head and its input: --receiver L.H --input q|k|v")
        if parse_layer_head(args.receiver) is None:
            raise ModelError(f"--receiver {args.receiver!r}: write the receiver head as LAYER.HEAD, e.g. 9.6")
    elif args.receiver is not None or args.input is not None:
        raise ModelError("--receiver and --input choose path patching's receiver; add --what path")
    if args.what == "heads-by-pos" and args.layer is None:
        raise ModelError("--what heads-by-pos patches one layer's heads by position: add --layer L")
    if args.layer is not None and args.what != "heads-by-pos":
        raise ModelError(f"--layer chooses the layer of --what heads-by-pos; --what {args.what} covers every layer")
    if args.tokens and args.metric == "kl":
        raise ModelError("the kl metric compares whole distributions and takes no --tokens")
    check_mask_syntax(args.mask)
    from transformer_viewer.viewer.cli.sae_options import check_sae_syntax

    check_sae_syntax(args)


def metric_for(args, session, intervention=None):
    """The metric the arguments ask for, its default tokens read from this session's two runs."""
    from transformer_viewer.model.analysis.patching.metric import PatchMetric
    from transformer_viewer.viewer.cli.common import parse_token_pair

    tokens = parse_token_pair(args.tokens, session.tokenizer, session.n_vocab)
    need = {"logit-diff": 2, "logprob": 1, "kl": 0}[args.metric]
    if tokens is not None and len(tokens) != need:
        raise ModelError(f"--metric {args.metric} takes {need} token{'s' if need != 1 else ''} in --tokens, "
                         f"got {len(tokens)}")
    if tokens is None and need:
        tokens = default_tokens(session, args.position, need, intervention)
    return PatchMetric.make(args.metric, tokens or (), args.position, session.n_vocab)


def default_tokens(session, position, need: int, intervention=None) -> tuple[int, ...]:
    """The clean run's top prediction at the position, and for a pair the corrupted run's."""
    from transformer_viewer.model.analysis.patching.exact import metric_top_tokens

    clean_top, corrupted_top = metric_top_tokens(session, position, intervention)
    if need == 1:
        return (clean_top,)
    if clean_top == corrupted_top:
        label = session.tokenizer.label(clean_top)
        raise ModelError(f"the clean and the corrupted run both predict {label!r} first, so their logit "
                         "difference says nothing; give the two tokens to compare: --tokens A B")
    return clean_top, corrupted_top


def compute_grid(args, session, metric, intervention, progress):
    """The grid the arguments ask for, of the session's two prompts."""
    from transformer_viewer.model.analysis.patching.exact import BY_POSITION, EXACT_GRID_MAX_TOKENS

    T = len(session.tokens.ids)
    if not args.estimate and args.what in BY_POSITION and T > EXACT_GRID_MAX_TOKENS:
        raise ModelError(f"the exact {args.what} grid of {T:,} tokens is a patched run per position and layer; "
                         f"shorten the prompts to {EXACT_GRID_MAX_TOKENS} tokens or fewer, or add --estimate")
    if args.estimate:
        from transformer_viewer.model.analysis.patching.attribution_patching import (
            ESTIMATE_WHATS,
            estimate_grid,
        )

        if args.what not in ESTIMATE_WHATS:
            raise ModelError(f"--estimate covers --what {', '.join(ESTIMATE_WHATS)}; "
                             f"--what {args.what} is patched exactly only: leave out --estimate")
        return estimate_grid(session, args.what, metric, args.direction, intervention, layer=args.layer,
                             progress=progress)
    if args.what == "path":
        from transformer_viewer.model.analysis.patching.path_patching import path_patch_grid
        from transformer_viewer.model.capture.prompts import parse_layer_head

        return path_patch_grid(session, parse_layer_head(args.receiver), args.input, metric, args.direction,
                               intervention, progress=progress)
    from transformer_viewer.model.analysis.patching.exact import patch_grid

    return patch_grid(session, args.what, metric, args.direction, intervention, args.layer, progress=progress)


def run(args) -> int:
    session_arguments(args)  # --session: the checkpoint, the clean and corrupted prompts, the mask, SAEs and clamps
    check_arguments(args)
    import torch  # only once the arguments are good

    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.viewer.cli.common import (
        intervention_from_args,
        load_from_args,
        note_truncated,
        refuse_non_finite,
    )
    from transformer_viewer.viewer.cli.sae_options import attach_saes, clamps_from_args

    pairs = None
    if args.pairs is not None:
        from transformer_viewer.model.analysis.patching.pairs import read_pairs

        pairs = read_pairs(args.pairs)
    loaded = load_from_args(args)
    session = Session(loaded)

    def set_pair(clean: str, corrupted: str):
        """Both prompts set, and the Intervention for them (clamp positions are the clean prompt's)."""
        session.set_prompt(clean)
        session.set_corrupted(corrupted)
        if not session.tokens.ids or not session.corrupted.ids:
            raise ModelError("a prompt is empty; give both a clean and a corrupted text")
        note_truncated(session.dropped, len(session.tokens.ids), loaded.config.block_size)
        note_truncated(session.corrupted_dropped, len(session.corrupted.ids), loaded.config.block_size)
        return intervention_from_args(args, loaded.config, clamps=clamps_from_args(args, len(session.tokens.ids)))

    with TerminalBar("run", after_s=0.5, enabled=not args.no_progress) as bar, torch.inference_mode():
        if pairs is None:
            intervention = set_pair(args.clean, args.corrupted)
            attach_saes(args, session)  # for the session's model, its prompt set (an SAE notes a long one)
            metric = metric_for(args, session, intervention)
            grid = compute_grid(args, session, metric, intervention, bar.update)
            metrics = [metric]
        else:
            from transformer_viewer.model.analysis.patching.pairs import mean_grid

            grids, metrics = [], []
            for i, (clean, corrupted) in enumerate(pairs):
                intervention = set_pair(clean, corrupted)
                if i == 0:
                    attach_saes(args, session)
                metrics.append(metric_for(args, session, intervention))
                grids.append(compute_grid(args, session, metrics[-1], intervention, None))
                bar.update(i + 1, len(pairs), "pair")
            grid = mean_grid(grids)
    import numpy as np

    refuse_non_finite("patched metrics", [grid.clean, grid.corrupted], grid.raw[~np.isnan(grid.raw)])
    result = as_json(grid, session, pairs, metrics, args, intervention)
    if args.json:
        from transformer_viewer.viewer.cli.common import write_json_or_print

        write_json_or_print(result, None)
    elif args.out is not None:
        print(f"wrote {write_out(grid, result, args, intervention)}", file=sys.stderr)
    else:
        print_table(grid, result)
    return 0


def as_json(grid, session, pairs, metrics, args, intervention) -> dict:
    """What the command reports: the model, the prompts, the metric and every cell."""
    tok = session.tokenizer
    normalised = grid.normalised
    cells = [{"row": grid.rows[r], "col": grid.cols[c], "r": r, "c": c, "raw": float(grid.raw[r, c]),
              "normalised": float(normalised[r, c])}
             for r in range(grid.raw.shape[0]) for c in range(grid.raw.shape[1])]
    prompts = ({"pairs": [{"clean": a, "corrupted": b} for a, b in pairs], "pairs_file": os.path.basename(args.pairs)}
               if pairs is not None else {"clean": args.clean, "corrupted": args.corrupted})
    first = metrics[0]
    return {"model": session.loaded.name, "source": session.loaded.source, **prompts,
            "what": grid.what, "direction": grid.direction, "estimate": grid.estimate,
            "metric": {"kind": first.kind, "describe": grid.metric, "position": first.position,
                       "tokens": [list(m.tokens) for m in metrics] if pairs is not None else list(first.tokens),
                       "token_text": [tok.token_bytes(t).decode("utf-8", "replace") for t in first.tokens]},
            "clean_metric": grid.clean, "corrupted_metric": grid.corrupted,
            "normalisation": "(raw - corrupted_metric) / (clean_metric - corrupted_metric): corrupted = 0, clean = 1",
            "normalisable": grid.normalisable,
            "intervention": intervention.describe(),
            "clamps": [c.describe() for c in intervention.clamps],
            "note": grid.note, "row_axis": grid.row_axis, "col_axis": grid.col_axis,
            "rows": list(grid.rows), "cols": list(grid.cols), "cells": cells}


def write_out(grid, result: dict, args, intervention=None) -> str:
    """The grid to --out: raw values as .npy/.csv with a .json sidecar, or the view's figure."""
    import json

    from transformer_viewer.viewer.export import export_matrix, write_file

    if args.out.lower().endswith(FIGURE_SUFFIXES):
        try:
            from transformer_viewer.viewer.cli.patch_figure import write_figure
        except ImportError:
            raise ModelError(f"--out {args.out}: figures come from the window's patching view, which this build "
                             "does not have; write .npy or .csv") from None
        pairs_name = result.get("pairs_file", "")
        return write_figure(grid, result.get("clean", ""), result.get("corrupted", ""), args.out,
                            model=result["model"], pairs_name=pairs_name, intervention=intervention)
    path = export_matrix(grid.raw, args.out, grid.rows, grid.cols)
    sidecar = {k: v for k, v in result.items() if k != "cells"}
    sidecar.update(file=os.path.basename(path), shape=list(grid.raw.shape), dtype=str(grid.raw.dtype),
                   values="the raw metric of each patched run (NaN: not computed)")
    from transformer_viewer.viewer.cli.common import json_safe

    write_file(path + ".json", (json.dumps(json_safe(sidecar), indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    return path


def print_table(grid, result: dict) -> None:
    """A few lines for people: the metric, both runs' values, and the cells that move it most."""
    import numpy as np

    kind = "estimated (attribution patching)" if grid.estimate else "exact"
    print(f"{result['model']}: {kind} {grid.direction} patching of {grid.what}, {grid.metric}")
    print(f"  clean {grid.clean:.4f}   corrupted {grid.corrupted:.4f}"
          + ("" if grid.normalisable else "   (too close for the normalised values to mean much)"))
    if grid.note:
        print(f"  {grid.note}")
    effect = np.abs(np.nan_to_num(grid.raw - grid.corrupted if grid.direction == "denoise" else grid.raw - grid.clean))
    order = np.argsort(-effect, axis=None, kind="stable")[:TABLE_CELLS]
    norm = grid.normalised
    print(f"  {grid.row_axis:>18}  {grid.col_axis:<18} {'raw':>10} {'normalised':>11}")
    for flat in order:
        r, c = np.unravel_index(flat, grid.raw.shape)
        if np.isnan(grid.raw[r, c]):
            continue
        print(f"  {grid.rows[r]:>18}  {grid.cols[c][:18]:<18} {grid.raw[r, c]:>10.4f} {norm[r, c]:>11.3f}")
