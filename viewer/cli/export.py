"""`transformer-viewer export`: render a view to PNG/SVG/PDF, or write its matrix to .npy/.csv, without a window.

Every view the registry marks exportable can be written (`--view NAME`). The view is built
exactly as the window builds it, from a `ViewerState` holding this prompt's traces and an
`InlineWorker` that answers the view's own requests (lens, scan) at once on this thread; the
registry entry then applies the view's arguments.
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
    intervention_from_args,
    load_from_args,
    refuse_non_finite,
)
from transformer_viewer.viewer.views.registry import exportable
from transformer_viewer.viewer.worker.inline import InlineWorker

MAX_WIDENED = 6000  # pixels an export may grow to, without --size, for its cell texts to show


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: write WIDTHxHEIGHT in pixels, e.g. 1200x1000") from None
    if not (16 <= w <= 16384 and 16 <= h <= 16384):
        raise argparse.ArgumentTypeError(f"size {text!r}: each side must be 16..16384 pixels")
    return w, h


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(parser)
    parser.add_argument("--prompt", required=True, help="text to run through the model")
    parser.add_argument("--view", default="attention", choices=sorted(exportable()),
                        help="what to export (default: attention)")
    parser.add_argument("--layer", type=int, default=None, help="layer, 0-based (default: 0; grid: none selected)")
    parser.add_argument("--head", type=int, default=None, help="head, 0-based (default: 0; grid: none selected)")
    parser.add_argument("--query", type=int, default=None, help="highlight this query row (0-based)")
    parser.add_argument("--mode", default="head", choices=["head", "layer-mean", "head-mean"],
                        help="attention: one head, mean of the layer's heads, or mean over layers of this head")
    parser.add_argument("--mask", nargs="+", action="extend", default=[], metavar="L.H",
                        help="heads to ablate, e.g. 3.1 or 0.* for a layer; repeatable")
    add_ablation_argument(parser, "how masked heads are ablated")
    parser.add_argument("--colormap", default="viridis", help="viridis, inferno, magma, plasma, cividis, CET-D1, ...")
    parser.add_argument("--log", action="store_true", help="log colour scale (1e-4 .. 1)")
    parser.add_argument("--scale", type=float, default=1.0, help="PNG pixel scale (default: 1; 2 for print)")
    parser.add_argument("--size", type=_size, default=None, metavar="WxH", help="layout size in pixels (default: per view)")
    parser.add_argument("--out", required=True, help="output file: .png, .svg or .pdf (vector), .npy or .csv")
    g = parser.add_argument_group("residual, mlp, logit-lens, scan, attribution and diff views")
    g.add_argument("--diff", action="store_true",
                   help="residual/mlp/logit-lens: show masked minus clean (needs --mask)")
    g.add_argument("--target", default=None, help="scan, attribution: target token (one token of the model's vocabulary as text, or an id)")
    g.add_argument("--distractor", default=None, help="scan, attribution: measure logit(target) - logit(distractor)")
    g.add_argument("--show", default="effect", choices=["effect", "kl", "prob"],
                   help="scan: effect on the metric, KL divergence, or p(target) (default: effect)")
    g.add_argument("--sort", default="max", choices=["max", "token", "index"],
                   help="mlp: order neurons by max activation, activation on --query, or index (default: max)")
    g.add_argument("--rows", type=int, default=64, help="mlp: how many neurons to show (default: 64)")


def _qt_app():
    # Exports never show a window; offscreen also works where there is no display at all.
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6 import QtCore, QtWidgets

    app = QtWidgets.QApplication.instance()
    if app is None:
        QtCore.qInstallMessageHandler(_quiet_offscreen)
        app = QtWidgets.QApplication(["transformer-viewer"])
    return app


def _quiet_offscreen(mode, context, message: str) -> None:
    # The offscreen platform warns about window size hints it cannot honour; nothing to act on.
    if "propagateSizeHints" in message:
        return
    print(message, file=sys.stderr)


def run(args) -> int:
    from transformer_viewer.viewer.export import export_view

    check_arguments(args)  # everything that needs no model, said before one loads

    import torch

    torch.set_num_threads(min(4, torch.get_num_threads()))
    from transformer_viewer.viewer.worker.handlers import WorkerSession

    loaded = load_from_args(args)
    c = loaded.config
    for name, value, top in (("layer", args.layer, c.n_layer), ("head", args.head, c.n_head)):
        if value is not None and not 0 <= value < top:
            raise ModelError(f"--{name} {value} does not exist; the model has {name}s 0..{top - 1}")
    intervention = intervention_from_args(args, c)
    session = WorkerSession(loaded)  # views ask for full patterns and activations as they draw

    app = _qt_app()
    bar = TerminalBar("head")  # for the requests that report progress (the scan)
    worker = InlineWorker(session, report=lambda progress: bar.update(progress.done, progress.total))
    state = _state(worker, intervention, args)
    entry = exportable()[args.view]
    widget = entry.build(state, worker)
    try:
        if entry.configure is not None:
            entry.configure(widget, args)
        size = args.size or entry.export_size
        if size:
            widget.resize(*size)
        else:
            widget.resize(widget.sizeHint())
        widget.show()
        app.processEvents()
        if args.size is None:
            widen_for_cell_texts(widget, app)
        path = export_view(widget, args.out, scale=args.scale)
    finally:
        bar.close()
        _dispose(widget, app)
    print(path, file=sys.stdout)
    return 0


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
    mask's syntax and the colormap."""
    from transformer_viewer.viewer.cli.common import check_mask_syntax
    from transformer_viewer.viewer.export import check_writable, extension

    extension(args.out)
    check_writable(args.out)
    if not 0 < args.scale <= 16:
        raise ModelError(f"--scale {args.scale:g} is out of range; give a pixel scale above 0 and at most 16 (2 for print)")
    for flag in ("layer", "head", "query"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise ModelError(f"--{flag} {value}: counts from 0; give 0 or more")
    check_mask_syntax(args.mask)
    if getattr(args, "rows", 1) < 1:
        raise ModelError(f"--rows must be at least 1, got {args.rows}")
    if args.colormap:
        _check_colormap(args.colormap)


def _state(worker, intervention, args):
    """A ViewerState as the window would hold it after running `args.prompt` under `intervention`."""
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.worker.requests import LogprobsRequest, TraceRequest

    st = ViewerState()
    st.set_model(worker.session.info())
    st.set_intervention(intervention)
    st.set_prompt(args.prompt)
    traced = []
    worker.submit(TraceRequest(text=args.prompt, intervention=intervention), on_result=traced.append)
    trace, clean = traced[0].value.trace, traced[0].value.clean
    if trace.token_logprobs is None:  # the second pass the window makes once the views are drawn
        filled = []
        worker.submit(LogprobsRequest(text=args.prompt, intervention=intervention), on_result=filled.append)
        trace = filled[0].value.trace or trace
        clean = filled[0].value.clean or clean
    refuse_non_finite("next-token probabilities", trace.next.top_probs,
                      [] if trace.token_logprobs is None else trace.token_logprobs[1:])  # NaN at t = 0 by design
    if args.query is not None and not 0 <= args.query < trace.n_tokens:
        raise ModelError(f"--query {args.query} is outside the prompt's {trace.n_tokens} tokens (0..{trace.n_tokens - 1})")
    st.set_traces(trace, clean)
    st.set_selection(layer=args.layer or 0, head=args.head or 0,
                     query=args.query if args.query is not None else trace.n_tokens - 1)
    return st


def _dispose(widget, app) -> None:
    # Delete the C++ widget now, while the QApplication is alive: left to interpreter shutdown,
    # pyqtgraph's scene can outlive the app and crash on exit.
    import shiboken6

    widget.close()
    if shiboken6.isValid(widget):
        shiboken6.delete(widget)
    app.processEvents()


def _check_colormap(name: str) -> None:
    from transformer_viewer.viewer.views.heatmap import get_colormap

    _qt_app()
    try:
        get_colormap(name)
    except ValueError as e:
        raise ModelError(f"--colormap: {e}") from None
