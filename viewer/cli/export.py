"""`transformer-viewer export`: render a view to PNG/SVG/PDF, or write its matrix to .npy/.csv, without a window.

Every view the registry marks exportable can be written (`--view NAME`). The view is built
exactly as the window builds it, from a `ViewerState` holding this prompt's traces and an
`InlineWorker` that answers the view's own requests (lens, scan) at once on this thread; the
`export_views.py` then applies the view's arguments.

An image is a figure (viewer/figure.py): the view's plots alone, light by default (`--theme
dark` as on screen), titled with the model, the view and the mask, sized in logical pixels
(`--size`) or in inches or centimetres (`--width`), a PNG at `--dpi` (300). The attention
view's data export is exact: the head's whole (T, T) float32 pattern recomputed and streamed
to the file (or the mean of the heads' patterns, for the mean modes); `--pooled` writes the
pooled overview the heatmap draws instead, with a `.json` sidecar that says the pooling.

`--sae PATH[@HOOK]` (repeatable) attaches SAEs to the export's session, numbered in order, and
`--clamp` clamps their features (viewer/cli/sae_options.py): the state's Intervention holds
the clamps, so the trace and every request a view makes are computed under them, as in the
window. `--session` brings the session's SAEs and clamps for those not given.

`--view patching` compares `--prompt` (the clean prompt) with `--corrupted`, its experiment
given by `patch`'s options (viewer/cli/patch_options.py) or a session's patching part: the state
holds the setup as the window's controls would, the view asks its grid through the worker's
patching requests (the estimate first, then the exact grid; `--estimate`: the estimate alone,
drawn), and `.npy`/`.csv` hold the shown grid's raw metric with `patch`'s `.json` sidecar.

`--write-manifest` writes OUT.manifest.json (model/sessions/figure_manifest.py): the checkpoint,
prompt, mask and clamps, the SAEs they name, the machine and these options. `--from-manifest`
takes all of them back (`manifest_arguments`): its SAEs are opened through the same load as
`--sae` and their fingerprints compared, and `--sae` given stand in for their paths, in order
(what a private manifest, which leaves them out, needs). A patching figure's manifest holds the
experiment (its `patching` part); a private one leaves the corrupted prompt out as well, so
regenerating it needs `--prompt` and `--corrupted` again.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import replace

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import (
    TerminalBar,
    add_ablation_argument,
    add_checkpoint_arguments,
    add_session_argument,
    intervention_from_args,
    load_from_args,
    note_truncated,
    parse_head_option,
    refuse_non_finite,
    session_arguments,
)
from transformer_viewer.viewer.cli.export_views import apply_region, configure_view
from transformer_viewer.viewer.cli.offscreen import dispose_widget, offscreen_app
from transformer_viewer.viewer.cli.sae_options import add_clamp_argument, add_sae_argument
from transformer_viewer.viewer.figure import THEMES
from transformer_viewer.viewer.views.registry import exportable
from transformer_viewer.viewer.worker.inline import InlineWorker

MAX_WIDENED = 6000  # pixels an export may grow to, without --size, for its cell texts to show
DEFAULT_DPI = 300
LARGE_FILE = 64 << 20  # a data export estimated over this many bytes is announced before it is written
CSV_BYTES_PER_VALUE = 12  # "0.123456789," and the like: what a CSV cell of %.9g takes, about


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: write WIDTHxHEIGHT in pixels, e.g. 1200x1000") from None
    if not (16 <= w <= 16384 and 16 <= h <= 16384):
        raise argparse.ArgumentTypeError(f"size {text!r}: each side must be 16..16384 pixels")
    return w, h


def _region(text: str) -> tuple[float, float, float, float]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 4 or not all(math.isfinite(v) for v in values) or not (
            values[0] < values[1] and values[2] < values[3]):
        raise argparse.ArgumentTypeError(f"region {text!r}: write X0,X1,Y0,Y1 in cells with X0 < X1 and Y0 < Y1, "
                                         "e.g. 0,8,0,8 (columns, then rows)")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(parser)
    parser.add_argument("--prompt", default=None, help="text to run through the model (or the one a --session ran)")
    add_session_argument(parser)
    parser.add_argument("--view", default="attention", choices=sorted(exportable()),
                        help="what to export (default: attention)")
    parser.add_argument("--layer", type=int, default=None, help="layer, 0-based (default: 0; grid: none selected)")
    parser.add_argument("--head", default=None, metavar="[L.]H",
                        help="head as LAYER.HEAD (e.g. 2.2), or its number with --layer; 0-based "
                             "(default: 0.0; grid: none selected)")
    parser.add_argument("--query", type=int, default=None, help="highlight this query row (0-based)")
    parser.add_argument("--mode", default="head", choices=["head", "layer-mean", "head-mean"],
                        help="attention: one head, mean of the layer's heads, or mean over layers of this head")
    parser.add_argument("--mask", nargs="+", action="extend", default=[], metavar="L.H",
                        help="heads to ablate, e.g. 3.1 or 0.* for a layer; repeatable")
    add_ablation_argument(parser, "how masked heads are ablated")
    add_sae_argument(parser, required=False)
    add_clamp_argument(parser)
    parser.add_argument("--colormap", default="viridis", help="viridis, inferno, magma, plasma, cividis, CET-D1, ...")
    parser.add_argument("--log", action="store_true", help="log colour scale (1e-4 .. 1)")
    parser.add_argument("--theme", default="light", choices=sorted(THEMES),
                        help="figure colours: light (white page, dark text; default) or dark (as on screen); "
                             "the colormap is the same in both")
    parser.add_argument("--width", default=None, metavar="LENGTH",
                        help="figure width on the page, e.g. 3.5in, 8cm or 80mm (height: the view's proportions)")
    parser.add_argument("--dpi", type=float, default=None,
                        help=f"PNG pixels per inch (default: {DEFAULT_DPI}); PNG pixels = width x dpi")
    parser.add_argument("--scale", type=float, default=None,
                        help="PNG pixels per layout pixel, instead of --dpi (1: the on-screen size)")
    parser.add_argument("--size", type=_size, default=None, metavar="WxH",
                        help="figure size in pixels; wins over --width and --dpi (a PNG is exactly W x H)")
    parser.add_argument("--pooled", action="store_true",
                        help="attention .npy/.csv: the pooled overview the heatmap draws (with a .json sidecar "
                             "saying the pooling) instead of the head's exact (T, T) pattern")
    parser.add_argument("--out", required=True, help="output file: .png, .svg or .pdf (vector), .npy or .csv")
    m = parser.add_argument_group("reproducible figures")
    m.add_argument("--write-manifest", action="store_true",
                   help="also write OUT.manifest.json: the checkpoint and its fingerprint, the prompt, the mask, "
                        "the SAEs and clamps, these options and the machine, from which --from-manifest "
                        "regenerates the file")
    m.add_argument("--manifest-private", action="store_true",
                   help="leave the prompt and local paths out of the manifest (regenerating then needs --prompt, "
                        "the checkpoint and each --sae)")
    m.add_argument("--embed-manifest", action="store_true",
                   help="embed the manifest in the .svg's or .pdf's own metadata (with --manifest-private, "
                        "without the prompt and local paths)")
    m.add_argument("--from-manifest", default=None, metavar="FILE.manifest.json",
                   help="regenerate the figure a manifest describes (or a figure with one embedded), to --out")
    g = parser.add_argument_group("residual, mlp, logit-lens, scan, attribution and diff views")
    g.add_argument("--diff", action="store_true",
                   help="residual/mlp/logit-lens: show the run minus the clean run (needs --mask or --clamp)")
    g.add_argument("--target", default=None, help="scan, attribution: target token (one token of the model's vocabulary as text, or an id)")
    g.add_argument("--distractor", default=None, help="scan, attribution: measure logit(target) - logit(distractor)")
    g.add_argument("--show", default="effect", choices=["effect", "kl", "prob"],
                   help="scan: effect on the metric, KL divergence, or p(target) (default: effect)")
    g.add_argument("--sort", default="max", choices=["max", "token", "index"],
                   help="mlp: order neurons by max activation, activation on --query, or index (default: max)")
    g.add_argument("--rows", type=int, default=64, help="mlp: how many neurons to show (default: 64)")
    g.add_argument("--region", type=_region, default=None, metavar="X0,X1,Y0,Y1",
                   help="views with a heatmap: draw only this part of it, in cells (columns X0..X1, rows Y0..Y1; "
                        "fractions too), as the view zoomed in")
    from transformer_viewer.viewer.cli.patch_options import add_experiment_arguments

    p = parser.add_argument_group("patching view (--prompt is the clean prompt; --layer: heads-by-pos's layer)")
    p.add_argument("--corrupted", default=None, help="patching: the corrupted prompt (required for --view patching)")
    add_experiment_arguments(p, layer=False)


def run(args) -> int:
    if args.from_manifest:
        manifest_arguments(args)
    session_arguments(args)  # --session: the checkpoint, prompt and mask it saved
    check_arguments(args)  # everything that needs no model, said before one loads

    import torch

    torch.set_num_threads(min(4, torch.get_num_threads()))
    from transformer_viewer.viewer.cli.sae_options import clamps_from_args
    from transformer_viewer.viewer.worker.handlers import WorkerSession

    loaded = load_from_args(args)
    c = loaded.config
    for name, value, top in (("layer", args.layer, c.n_layer), ("head", args.head, c.n_head)):
        if value is not None and not 0 <= value < top:
            raise ModelError(f"--{name} {value} does not exist; the model has {name}s 0..{top - 1}")
    session = WorkerSession(loaded)  # views ask for full patterns and activations as they draw
    saes = _open_saes(args, session)
    clamps = clamps_from_args(args, len(session.tokens.ids)) if saes else ()  # a clamp needs an SAE
    intervention = intervention_from_args(args, c, clamps=clamps)

    app = offscreen_app()
    bar = TerminalBar("head")  # for the requests that report progress (the scan)
    worker = InlineWorker(session, report=lambda progress: bar.update(progress.done, progress.total))
    state = _state(worker, intervention, args)
    trace = state.trace
    note_truncated(trace.dropped_tokens, trace.n_tokens, c.block_size)
    if args.view == "patching":
        _set_up_patching(args, session, state)
    entry = exportable()[args.view]
    widget = entry.build(state, worker)
    worker.hold_errors()  # a view's request fails inside Qt's events: raised below, as one line
    try:
        configure_view(args.view, widget, args)
        base = entry.export_size or (widget.sizeHint().width(), widget.sizeHint().height())
        widget.resize(*(args.size or base))
        widget.show()
        app.processEvents()
        if args.size is None and args.width is None:
            widen_for_cell_texts(widget, app)
        if args.region is not None:  # zoomed once laid out: the view's own drawing resets its range
            apply_region(args.view, widget, args.region)
            app.processEvents()
        if args.embed_manifest:
            from transformer_viewer.model.sessions.figure_manifest import manifest_text

            records = export_records(args, loaded, state, args.out, "", saes)
            records["export"] = replace(records["export"], file="")  # the file holding it: any name
            args.embedded = manifest_text(records, private=args.manifest_private)
        if args.view == "patching":
            _check_patched(widget, args, worker)
        worker.raise_held()
        path = _write(widget, entry, state, session, args)
        worker.raise_held()
        if args.write_manifest:
            write_export_manifest(args, loaded, state, path, saes)
    finally:
        bar.close()
        dispose_widget(widget, app)
    print(path, file=sys.stdout)
    return 0


def _set_up_patching(args, session, state) -> None:
    """The patching view's experiment in the state, as the window's controls would set it: the
    corrupted prompt tokenized, the metric's tokens (by default the two runs' top predictions,
    read as `patch` reads them) and the position counted from the start."""
    from transformer_viewer.viewer.cli.patch_options import absolute_position, check_exact_size, metric_for

    session.prepare_analysis(args.prompt)
    session.set_corrupted(args.corrupted)
    if not session.corrupted.ids:
        raise ModelError("the corrupted prompt is empty; give its text with --corrupted TEXT")
    note_truncated(session.corrupted_dropped, len(session.corrupted.ids), state.model_info.block_size)
    T = len(session.tokens.ids)
    position = absolute_position(args.position, T)
    check_exact_size(args.what, T, args.estimate)
    metric = metric_for(args, session, state.intervention)
    receiver = args.receiver.split(".") if args.what == "path" else (0, 0)
    state.set_corrupted_tokens(session.corrupted)
    state.set_patching(comparing=True, corrupted=args.corrupted, metric=args.metric, tokens=tuple(metric.tokens),
                       position=position, direction=args.direction, what=args.what,
                       layer=args.layer if args.what == "heads-by-pos" else 0,
                       receiver=tuple(int(v) for v in receiver), input=args.input or "v",
                       normalised=getattr(args, "normalised", True))


def _check_patched(widget, args, worker) -> None:
    """The patching view drew the grid asked for (an estimate that failed on the way to the exact
    grid is passed over, as the window passes over it), or one line says why not."""
    grid = widget.shown_grid()
    if grid is not None and grid.estimate == bool(args.estimate):
        worker.held.clear()
        return
    worker.raise_held()
    if grid is None:
        raise ModelError(f"no patching grid: {widget.info.text() or 'nothing was computed'}")
    if args.estimate:
        why = widget.estimate_failure or f"attribution patching does not estimate --what {args.what} here"
        raise ModelError(f"no estimate: {why}; leave out --estimate for the exact grid")
    raise ModelError(f"the prompt's {widget.state.n_tokens:,} tokens are more than the patching view computes "
                     f"exactly ({widget.exact_max_tokens}); add --estimate, or shorten the prompts")


def _open_saes(args, session) -> tuple:
    """Attach each --sae to the session (SAE i is the i-th, as the clamps name them), with the
    prompt set first for the notes of an SAE trained on shorter contexts; their SaeRecords."""
    from transformer_viewer.viewer.cli.sae_options import attach_saes, sae_records

    if not args.sae:
        return ()
    session.ensure_prompt(args.prompt)
    return sae_records(args, attach_saes(args, session))


def manifest_arguments(args) -> None:
    """Take the export's options, checkpoint, prompt, mask, SAEs and clamps from
    `--from-manifest`; the checkpoint and prompt given on the command line win (a private
    manifest has neither), and `--sae` given replace the paths of its SAEs, in order."""
    from transformer_viewer.model.sessions.figure_manifest import FIX, read_manifest
    from transformer_viewer.viewer.cli.common import fill_from_records
    from transformer_viewer.viewer.cli.sae_options import fill_from_manifest

    records, notes = read_manifest(args.from_manifest)
    for note in notes:
        print(f"note: {args.from_manifest}: {note}", file=sys.stderr)
    e = records["export"]
    if e.view not in exportable():
        raise ModelError(f"{args.from_manifest}: the view {e.view[:40]!r} cannot be exported by this version; "
                         f"it exports {', '.join(sorted(exportable()))}")
    for name in ("view", "layer", "head", "query", "mode", "colormap", "log", "theme", "width", "dpi", "scale",
                 "size", "pooled", "diff", "target", "distractor", "show", "sort", "rows", "region", "estimate"):
        setattr(args, name, getattr(e, name))
    patching = records.pop("patching", None)
    if e.view == "patching":
        from transformer_viewer.viewer.cli.patch_options import fill_from_record

        if patching is None:
            raise ModelError(f"{args.from_manifest}: a patching figure's manifest without its `patching` part; {FIX}")
        fill_from_record(args, patching, override=True)
        if e.private and (args.prompt is None or args.corrupted is None):
            raise ModelError(f"{args.from_manifest}: a private manifest leaves both prompts out; give them again "
                             "with --prompt CLEAN --corrupted CORRUPTED")
    args.embed_manifest = args.embed_manifest or e.embed
    args.manifest_private = args.manifest_private or e.private
    args.head = None if e.head is None else str(e.head)  # as typed: check_arguments parses it
    args.mask = []
    origin = f"the manifest {args.from_manifest}"
    saes = records.pop("saes", None)  # its SAEs and clamps: fill_from_manifest's, not a session's
    fill_from_records(args, records, origin)
    fill_from_manifest(args, saes, records.get("intervention"), origin, e.private)


def export_records(args, loaded, state, path: str, sha256: str, saes: tuple = ()) -> dict:
    """The manifest's records of the export to `path` (see model/sessions/figure_manifest.py);
    `saes`: the SaeRecords of the SAEs open, whose features the state's clamps name."""
    from transformer_viewer.model.sessions.figure_manifest import ExportRecord
    from transformer_viewer.viewer.export import extension

    export = ExportRecord(view=args.view, out_format=extension(path), layer=args.layer, head=args.head,
                          query=args.query, mode=args.mode, colormap=args.colormap, log=args.log, theme=args.theme,
                          width=args.width, dpi=args.dpi, scale=args.scale, size=args.size, pooled=args.pooled,
                          diff=args.diff, target=args.target, distractor=args.distractor, show=args.show,
                          sort=args.sort, rows=args.rows, region=args.region, file=os.path.basename(path), sha256=sha256,
                          embed=args.embed_manifest, private=args.manifest_private, estimate=args.estimate)
    patching = None
    if args.view == "patching":
        from transformer_viewer.model.sessions.patching_part import PatchingRecord

        patching = PatchingRecord(**state.patching.__dict__)
    return manifest_records(loaded, args.prompt, state.intervention, export, saes, patching)


def manifest_records(loaded, prompt: str, intervention, export, saes: tuple = (), patching=None) -> dict:
    """A manifest's records: the checkpoint, the (clean) `prompt`, the `intervention` (head mask
    and feature clamps), the environment, the `export` part, and the SAEs and patching
    experiment when there are any."""
    from transformer_viewer.model.sessions.checkpoint_part import record_of
    from transformer_viewer.model.sessions.environment_part import current_environment
    from transformer_viewer.model.sessions.prompt_part import InterventionRecord, PromptRecord
    from transformer_viewer.model.sessions.saes_part import SaesRecord

    c, i = loaded.config, intervention
    masked = tuple((int(a), int(b)) for a, b in zip(*i.mask.nonzero(), strict=True))
    records = {"checkpoint": record_of(loaded), "prompt": PromptRecord(prompt),
               "intervention": InterventionRecord(c.n_layer, c.n_head, masked, i.ablation, tuple(i.clamps)),
               "environment": current_environment(loaded.model), "export": export}
    if saes:
        records["saes"] = SaesRecord(tuple(saes))
    if patching is not None:
        records["patching"] = patching
    return records


def write_export_manifest(args, loaded, state, path: str, saes: tuple = ()) -> str:
    """`path`.manifest.json for what was just written, with the file's sha256."""
    from transformer_viewer.model.sessions.figure_manifest import file_sha256, write_manifest

    records = export_records(args, loaded, state, path, file_sha256(path), saes)
    try:
        written = write_manifest(path, records, private=args.manifest_private)
    except OSError as e:
        raise ModelError(f"cannot write {path}.manifest.json: {e.strerror or e}; check the disk and the folder") from None
    print(f"wrote {written}", file=sys.stderr)
    return written


def figure_geometry(args, base: tuple[int, int]) -> tuple[tuple[int, int] | None, float]:
    """(figure size in logical pixels or None for the laid-out view's own, PNG pixels per
    logical pixel) from --size, --width, --dpi and --scale; `base`: the view's layout size."""
    from transformer_viewer.viewer.figure import CSS_DPI, parse_length

    if args.size is not None:
        return args.size, args.scale or 1.0
    dpi = args.dpi or DEFAULT_DPI
    if args.width is None:
        return None, args.scale or dpi / CSS_DPI
    inches = parse_length(args.width)
    width = max(16, round(inches * CSS_DPI))
    height = max(16, round(width * base[1] / base[0]))
    return (width, height), args.scale or max(1, round(inches * dpi)) / width


def _write(widget, entry, state, session, args) -> str:
    """Write the figure or the data the arguments ask for; returns the absolute path."""
    from transformer_viewer.viewer.export import check_raster, export_view, extension
    from transformer_viewer.viewer.figure import FigureStyle, view_title

    ext = extension(args.out)
    if ext in (".npy", ".csv"):
        if args.view == "attention" and not args.pooled:
            return _exact_attention(widget, state, session, args)
        path = export_view(widget, args.out)
        if args.view == "patching":
            _patching_sidecar(widget, state, session, args, path)
        if args.pooled:
            _pooling_sidecar(widget, state, session, args, path)
        return path
    notes = tuple(widget.figure_notes()) if hasattr(widget, "figure_notes") else ()  # as the window's figure has them
    style = FigureStyle(theme=args.theme, title=view_title(state, entry.title, widget), notes=notes,
                        manifest=getattr(args, "embedded", ""))
    size, scale = figure_geometry(args, (widget.width(), widget.height()))
    if ext == ".png" and size is not None:
        check_raster(round(size[0] * scale), round(size[1] * scale))
    return export_view(widget, args.out, scale=scale, size=size, style=style)


def _exact_attention(widget, state, session, args) -> str:
    """The attention view's matrix at full precision: one head's (T, T) float32 pattern
    recomputed and streamed to the file; for the mean modes, the mean of the heads' patterns."""
    import numpy as np

    from transformer_viewer.model.capture.memory_budget import size_text
    from transformer_viewer.model.capture.on_demand import head_pattern, save_head_pattern
    from transformer_viewer.viewer.export import check_writable, export_matrix

    trace, layer, head, mode = state.trace, state.layer, state.head, widget.mode()
    T = trace.n_tokens
    estimate = 128 + T * T * (4 if args.out.lower().endswith(".npy") else CSV_BYTES_PER_VALUE)
    if estimate > LARGE_FILE:
        print(f"note: writing the full {T} x {T} pattern, about {size_text(estimate)} "
              "(--pooled writes the pooled overview instead)", file=sys.stderr)
    path = check_writable(args.out)
    if mode == "head":
        with TerminalBar("row", after_s=1.0) as bar:
            try:
                save_head_pattern(session, trace, layer, head, path, progress=bar.update, labels=tuple(trace.labels))
            except OSError as e:
                raise ModelError(f"cannot write {path}: {e.strerror or e}; check the disk and the folder") from None
        return path
    heads = [(layer, h) for h in range(state.n_head)] if mode == "layer-mean" else \
        [(L, head) for L in range(state.n_layer)]
    total = np.zeros((T, T), dtype=np.float32)
    for L, h in heads:
        total += head_pattern(session, trace, L, h)
    return export_matrix(total / np.float32(len(heads)), path, trace.labels, trace.labels)


def _pooling_sidecar(widget, state, session, args, path: str) -> None:
    """`path`.json: what a --pooled data export holds, so a script reading it knows."""
    import json

    from transformer_viewer.viewer.export import write_file

    matrix = widget.matrix()
    described = {"file": os.path.basename(path), "view": args.view, "shape": list(matrix.shape),
                 "dtype": str(matrix.dtype), "n_tokens": state.trace.n_tokens, "kernel_path": session.kernel_path}
    heatmap = getattr(widget, "heatmap", None)
    if args.view == "attention" and heatmap is not None:
        cell = heatmap.cell()
        described.update(layer=state.layer, head=state.head, mode=widget.mode(), tokens_per_cell=cell,
                         pooling=(f"{widget.pooling()} of each {cell} x {cell} block of tokens" if cell > 1
                                  else "none: one cell per token"),
                         stored_as="the trace's overview, float16 rounded to float32"
                         if "16" in str(state.trace.overview_max.dtype) else "the trace's overview")
    write_file(path + ".json", (json.dumps(described, indent=1) + "\n").encode("utf-8"))


def _patching_sidecar(widget, state, session, args, path: str) -> None:
    """`path`.json beside the patching grid's raw values: what `patch --out FILE.npy` writes."""
    from transformer_viewer.viewer.cli.patch_results import as_json, write_sidecar

    grid, p = widget.shown_grid(), state.patching
    metric = p.metric_value(state.model_info.vocab_size or None)
    result = as_json(grid, session, {"clean": args.prompt, "corrupted": args.corrupted}, [metric],
                     state.intervention)
    write_sidecar(grid, result, path)


def widen_for_cell_texts(widget, app, max_width: int = MAX_WIDENED) -> None:
    """Widen a view whose cell texts (the lens's top tokens, the scan's values) its default size
    leaves too narrow to show, so that the figure has them; never past `max_width` pixels, and
    not at all when the user chose --size."""
    from transformer_viewer.viewer.views.parts import TextHeatmap

    heatmaps = [widget] if isinstance(widget, TextHeatmap) else widget.findChildren(TextHeatmap)
    for heatmap in heatmaps:
        for _ in range(4):  # the layout gives the heatmap only a share of what the widget gains
            if not heatmap.text_items() or heatmap.texts_visible() or heatmap.width() <= 0:
                break
            need = heatmap.legible_width() - heatmap.width()
            width = widget.width() + -(-need * widget.width() // heatmap.width())
            if need <= 0 or width > max_width:
                break
            widget.resize(width, widget.height())
            app.processEvents()


def check_arguments(args) -> None:
    """Every argument that can be judged without the model: the output file, the numbers, the
    mask's and the clamps' syntax and the colormap."""
    from transformer_viewer.viewer.cli.common import check_mask_syntax
    from transformer_viewer.viewer.cli.sae_options import check_sae_syntax
    from transformer_viewer.viewer.export import check_writable, extension
    from transformer_viewer.viewer.figure import parse_length

    ext = extension(args.out)
    check_writable(args.out)
    args.layer, args.head = parse_head_option(args.head, args.layer)
    if args.scale is not None and not 0 < args.scale <= 16:
        raise ModelError(f"--scale {args.scale:g} is out of range; give a pixel scale above 0 and at most 16 (2 for print)")
    if args.dpi is not None and not 10 <= args.dpi <= 2400:
        raise ModelError(f"--dpi {args.dpi:g} is out of range; give 10 to 2400 (300 for print)")
    if args.width is not None:
        try:
            inches = parse_length(args.width)
        except ValueError as e:
            raise ModelError(f"--{e}") from None
        if not 0.5 <= inches <= 100:
            raise ModelError(f"--width {args.width} is out of range; give 0.5in (1.3cm) to 100in")
    if args.embed_manifest and ext not in (".svg", ".pdf"):
        raise ModelError(f"--embed-manifest is for .svg and .pdf figures, not {ext}; write the manifest beside "
                         "the file with --write-manifest")
    if args.pooled and (ext not in (".npy", ".csv") or args.view != "attention"):
        raise ModelError("--pooled is for the attention view's .npy or .csv export")
    if args.size is not None and ext == ".png":
        from transformer_viewer.viewer.export import check_raster

        check_raster(round(args.size[0] * (args.scale or 1)), round(args.size[1] * (args.scale or 1)))
    for flag in ("layer", "head", "query"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise ModelError(f"--{flag} {value}: counts from 0; give 0 or more")
    check_mask_syntax(args.mask)
    check_sae_syntax(args)
    _check_patching_arguments(args)
    if getattr(args, "rows", 1) < 1:
        raise ModelError(f"--rows must be at least 1, got {args.rows}")
    if args.colormap:
        _check_colormap(args.colormap)


def _check_patching_arguments(args) -> None:
    """The patching view's experiment (`patch`'s own checks), or none for any other view."""
    from transformer_viewer.viewer.cli.patch_options import check_experiment, given_experiment_options

    if args.view != "patching":
        given = given_experiment_options(args) + (["--corrupted"] if args.corrupted is not None else [])
        if given:
            raise ModelError(f"{' '.join(given)}: the patching experiment's options are for --view patching")
        return
    if args.corrupted is None:
        raise ModelError("--view patching compares two prompts: give the corrupted one with --corrupted TEXT "
                         "(--prompt is the clean one)")
    check_experiment(args, own_layer=False)


def _state(worker, intervention, args):
    """A ViewerState as the window would hold it after running `args.prompt` under `intervention`,
    made by the window's own run controller (a trace, then its log-probabilities)."""
    from transformer_viewer.viewer.controller import RunController
    from transformer_viewer.viewer.state import ViewerState

    st = ViewerState()
    controller = RunController(st, worker, st, follow=False)  # answers arrive before run() returns
    st.set_model(worker.session.info())
    st.set_intervention(intervention)
    st.set_prompt(args.prompt)
    controller.run()
    trace = st.trace
    refuse_non_finite("next-token probabilities", trace.next.top_probs,
                      [] if trace.token_logprobs is None else trace.token_logprobs[1:])  # NaN at t = 0 by design
    if args.query is not None and not 0 <= args.query < trace.n_tokens:
        raise ModelError(f"--query {args.query} is outside the prompt's {trace.n_tokens} tokens (0..{trace.n_tokens - 1})")
    st.set_selection(layer=args.layer or 0, head=args.head or 0,
                     query=args.query if args.query is not None else trace.n_tokens - 1)
    if st.query is not None:  # not the last token: the prediction follows it, as in the window
        controller.run()
    return st


def _check_colormap(name: str) -> None:
    from transformer_viewer.viewer.views.heatmap import get_colormap

    offscreen_app()
    try:
        get_colormap(name)
    except ValueError as e:
        raise ModelError(f"--colormap: {e}") from None
