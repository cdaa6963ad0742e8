"""`transformer-viewer patch [CHECKPOINT] --clean TEXT --corrupted TEXT [--metric logit-diff|logprob|kl]
[--tokens A [B]] [--position P] [--direction denoise|noise] [--what WHAT] [--layer L]
[--receiver L.H --input q|k|v] [--estimate] [--pairs FILE] [--mask L.H ...] [--ablation zero|mean]
[--sae PATH[@HOOK] ... --clamp [SAE:]FEATURE=VALUE|xSCALE[@POSITION] ...] [--session FILE]
[--json | --out FILE.npy|.csv|.png|.svg|.pdf [--write-manifest] [--manifest-private]
[--embed-manifest]]`: activation patching between a clean and a corrupted prompt, every cell of
one grid. The experiment's options are viewer/cli/patch_options.py's, shared with `export --view
patching`.

The head mask and the feature clamps apply to both prompts' runs and every patched run alike; a
clamp's position is a token position of the clean prompt (negative: from its end), and applies
to the corrupted prompt where it has that position. `--session` brings its SAEs and clamps as
`predict` does.

Default tokens: for logit-diff, the clean run's top prediction against the corrupted run's; for
logprob, the clean run's top prediction. `--json` prints both prompts, the model, the metric's
clean and corrupted values and, per cell, the raw and the normalised value (corrupted = 0,
clean = 1) with the axes labelled, the head mask and the clamps (`"clamps"`: each as `--clamp`
spells it). `.npy`/`.csv` hold the raw values, with a `.json` sidecar
saying everything else; figures are drawn by the window's patching view. `--write-manifest`
writes FILE.manifest.json beside the file (`--embed-manifest`: inside an SVG or PDF), the same
manifest `export --view patching --write-manifest` writes, so `export --from-manifest`
regenerates it; a pairs file's average has none.
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
    session_arguments,
)
from transformer_viewer.viewer.cli.patch_options import metric_for
from transformer_viewer.viewer.cli.patch_results import as_json, write_sidecar
from transformer_viewer.viewer.cli.sae_options import add_clamp_argument, add_sae_argument

DATA_SUFFIXES = (".npy", ".csv")
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
TABLE_CELLS = 12  # cells the text output lists, largest effect first


def add_arguments(p: argparse.ArgumentParser) -> None:
    from transformer_viewer.viewer.cli.patch_options import add_experiment_arguments, add_manifest_arguments

    add_checkpoint_arguments(p)
    add_session_argument(p)
    p.add_argument("--clean", default=None, help="the clean prompt (its answer is the one patches restore)")
    p.add_argument("--corrupted", default=None, help="the corrupted prompt (e.g. the clean one with the names swapped)")
    add_experiment_arguments(p)
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
    add_manifest_arguments(p)


def check_arguments(args) -> None:
    """Say any mistake in the arguments before a model loads."""
    from transformer_viewer.viewer.cli.common import check_mask_syntax
    from transformer_viewer.viewer.cli.patch_options import check_experiment

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
    if (args.write_manifest or args.manifest_private or args.embed_manifest) and args.out is None:
        raise ModelError("--write-manifest, --manifest-private and --embed-manifest describe the file --out writes; "
                         "add --out FILE")
    if args.embed_manifest and not args.out.lower().endswith((".svg", ".pdf")):
        raise ModelError("--embed-manifest is for .svg and .pdf figures; write the manifest beside the file with "
                         "--write-manifest")
    if args.pairs is not None and (args.write_manifest or args.embed_manifest):
        raise ModelError("a manifest regenerates one prompt pair's grid; a pairs file's average has none: "
                         "leave out --write-manifest, or patch one pair with --clean and --corrupted")
    check_experiment(args)
    check_mask_syntax(args.mask)
    from transformer_viewer.viewer.cli.sae_options import check_sae_syntax

    check_sae_syntax(args)


def compute_grid(args, session, metric, intervention, progress):
    """The grid the arguments ask for, of the session's two prompts."""
    from transformer_viewer.viewer.cli.patch_options import check_exact_size

    check_exact_size(args.what, len(session.tokens.ids), args.estimate)
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
            attached = attach_saes(args, session)  # for the session's model, its prompt set (an SAE notes a long one)
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
    prompts = ({"pairs": [{"clean": a, "corrupted": b} for a, b in pairs], "pairs_file": os.path.basename(args.pairs)}
               if pairs is not None else {"clean": args.clean, "corrupted": args.corrupted})
    result = as_json(grid, session, prompts, metrics, intervention)
    if args.json:
        from transformer_viewer.viewer.cli.common import write_json_or_print

        write_json_or_print(result, None)
    elif args.out is not None:
        manifest = None
        if pairs is None and (args.write_manifest or args.embed_manifest):
            from transformer_viewer.viewer.cli.sae_options import sae_records

            manifest = manifest_maker(args, loaded, session, metrics[0], intervention,
                                      sae_records(args, attached) if args.sae else ())
        if pairs is None and args.out.lower().endswith(FIGURE_SUFFIXES):
            grid = labelled(grid, metrics[0], session.tokenizer)
        print(f"wrote {write_out(grid, result, args, intervention, manifest)}", file=sys.stderr)
    else:
        print_table(grid, result)
    return 0


def write_out(grid, result: dict, args, intervention=None, manifest=None) -> str:
    """The grid to --out: raw values as .npy/.csv with a .json sidecar, or the view's figure.
    `manifest(path, size, sha256)`: the manifest's records of the file (`size`: a figure's laid-out
    size), when one is asked for; written beside it and/or embedded in an SVG or PDF."""
    from transformer_viewer.viewer.export import export_matrix

    size = None
    if args.out.lower().endswith(FIGURE_SUFFIXES):
        try:
            from transformer_viewer.viewer.cli.patch_figure import write_figure
        except ImportError:
            raise ModelError(f"--out {args.out}: figures come from the window's patching view, which this build "
                             "does not have; write .npy or .csv") from None

        def embedded(laid_out: tuple[int, int]) -> str:
            nonlocal size
            size = laid_out
            if not (manifest is not None and args.embed_manifest):
                return ""
            from dataclasses import replace

            from transformer_viewer.model.sessions.figure_manifest import manifest_text

            records = manifest(args.out, laid_out, "")
            records["export"] = replace(records["export"], file="")  # the file holding it: any name
            return manifest_text(records, private=args.manifest_private)

        pairs_name = result.get("pairs_file", "")
        path = write_figure(grid, result.get("clean", ""), result.get("corrupted", ""), args.out,
                            model=result["model"], pairs_name=pairs_name, intervention=intervention,
                            manifest=embedded)
    else:
        path = export_matrix(grid.raw, args.out, grid.rows, grid.cols)
        write_sidecar(grid, result, path)
    if manifest is not None and args.write_manifest:
        from transformer_viewer.model.sessions.figure_manifest import file_sha256, write_manifest

        try:
            written = write_manifest(path, manifest(path, size, file_sha256(path)), private=args.manifest_private)
        except OSError as e:
            raise ModelError(f"cannot write {path}.manifest.json: {e.strerror or e}; check the disk and the "
                             "folder") from None
        print(f"wrote {written}", file=sys.stderr)
    return path


def manifest_maker(args, loaded, session, metric, intervention, saes: tuple):
    """`manifest(path, size, sha256)` -> the manifest's records of `patch --out` writing `path`:
    the same records `export --view patching --write-manifest` writes for the same experiment."""
    from transformer_viewer.model.sessions.figure_manifest import ExportRecord
    from transformer_viewer.viewer.cli.export import manifest_records
    from transformer_viewer.viewer.cli.patch_figure import FIGURE_SCALE
    from transformer_viewer.viewer.cli.patch_options import patching_record
    from transformer_viewer.viewer.export import extension

    patching = patching_record(args, args.corrupted, metric, len(session.tokens.ids))

    def manifest(path: str, size, sha256: str) -> dict:
        ext = extension(path)
        export = ExportRecord(view="patching", out_format=ext, scale=FIGURE_SCALE if ext == ".png" else None,
                              size=None if size is None else tuple(size), file=os.path.basename(path), sha256=sha256,
                              embed=args.embed_manifest, private=args.manifest_private, estimate=args.estimate)
        return manifest_records(loaded, args.clean, intervention, export, saes, patching)

    return manifest


def labelled(grid, metric, tokenizer):
    """`grid` with its metric described by its tokens' labels, as the window's patching view names it."""
    from dataclasses import replace

    from transformer_viewer.viewer.views.logits_panel import token_label

    return replace(grid, metric=metric.describe(lambda t: token_label(t, tokenizer)))


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
