"""`transformer-viewer export`: render a view to PNG/SVG, or write its matrix to .npy/.csv, without a window.

Views are registered in VIEWS: name -> builder(trace, args[, session]) returning a widget with
`export_target()` and `matrix()` (see transformer_viewer.viewer.export). Later views (residual,
MLP, logit lens, scan, diff) add themselves here with `register_view` and any extra arguments in
`add_arguments`.
"""

from __future__ import annotations

import argparse
import os
import sys

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import add_checkpoint_arguments, load_from_args, parse_mask_spec

DEFAULT_SIZES = {"attention": (900, 820), "grid": None}  # None: the widget's sizeHint


def _build_attention(trace, args):
    from transformer_viewer.viewer.widgets.attention_panel import MODES, AttentionPanel

    if args.mode not in MODES:
        raise ModelError(f"--mode {args.mode}: use one of {', '.join(MODES)}")
    panel = AttentionPanel()
    panel.set_mode(args.mode)
    panel.set_colormap(args.colormap)
    panel.set_log_scale(args.log)
    try:
        panel.set_trace(trace, args.layer or 0, args.head or 0, args.query)
    except ValueError as e:
        raise ModelError(f"--layer/--head: {e}") from None
    return panel


def _build_grid(trace, args):
    from transformer_viewer.viewer.widgets.head_grid import HeadGridView

    grid = HeadGridView()
    grid.set_colormap(args.colormap)
    grid.set_log_scale(args.log)
    grid.set_patterns(trace.attention, trace.mask)
    if args.layer is not None and args.head is not None:
        grid.set_selected(args.layer, args.head)
    return grid


VIEWS = {
    "attention": _build_attention,
    "grid": _build_grid,
}


def register_view(name: str, builder, size: tuple[int, int] | None = (900, 820)) -> None:
    """Add a view: `builder(trace, args)` returns the widget; `size` None uses its sizeHint."""
    VIEWS[name] = builder
    DEFAULT_SIZES[name] = size


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
    parser.add_argument("--view", default="attention", choices=sorted(VIEWS), help="what to export (default: attention)")
    parser.add_argument("--layer", type=int, default=None, help="layer, 0-based (default: 0; grid: none selected)")
    parser.add_argument("--head", type=int, default=None, help="head, 0-based (default: 0; grid: none selected)")
    parser.add_argument("--query", type=int, default=None, help="highlight this query row (0-based)")
    parser.add_argument("--mode", default="head", choices=["head", "layer-mean", "head-mean"],
                        help="attention: one head, mean of the layer's heads, or mean over layers of this head")
    parser.add_argument("--mask", nargs="+", action="extend", default=[], metavar="L.H",
                        help="heads to ablate, e.g. 3.1 or 0.* for a layer; repeatable")
    parser.add_argument("--ablation", default="zero", choices=["zero", "mean"], help="how masked heads are ablated")
    parser.add_argument("--colormap", default="viridis", help="viridis, inferno, magma, plasma, cividis, CET-D1, ...")
    parser.add_argument("--log", action="store_true", help="log colour scale (1e-4 .. 1)")
    parser.add_argument("--scale", type=float, default=1.0, help="PNG pixel scale (default: 1; 2 for print)")
    parser.add_argument("--size", type=_size, default=None, metavar="WxH", help="layout size in pixels (default: per view)")
    parser.add_argument("--out", required=True, help="output file: .png, .svg, .npy or .csv")
    analysis_export.add_arguments(parser)


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
    from transformer_viewer.viewer.export import check_writable, export_view, extension

    extension(args.out)
    check_writable(args.out)  # fail before loading a model
    if args.colormap:
        _check_colormap(args.colormap)

    import torch

    torch.set_num_threads(min(4, torch.get_num_threads()))
    from transformer_viewer.model.session import Session

    loaded = load_from_args(args)
    c = loaded.config
    for name, value, top in (("layer", args.layer, c.n_layer), ("head", args.head, c.n_head)):
        if value is not None and not 0 <= value < top:
            raise ModelError(f"--{name} {value} does not exist; the model has {name}s 0..{top - 1}")
    mask = parse_mask_spec(args.mask, c.n_layer, c.n_head)
    session = Session(loaded)
    session.set_prompt(args.prompt)
    trace = session.run(mask, args.ablation)
    if args.query is not None and not 0 <= args.query < trace.n_tokens:
        raise ModelError(f"--query {args.query} is outside the prompt's {trace.n_tokens} tokens (0..{trace.n_tokens - 1})")

    app = _qt_app()
    widget = _build(VIEWS[args.view], trace, args, session)
    size = args.size or DEFAULT_SIZES.get(args.view, (900, 820))
    if size:
        widget.resize(*size)
    else:
        widget.resize(widget.sizeHint())
    widget.show()
    app.processEvents()
    try:
        path = export_view(widget, args.out, scale=args.scale)
    finally:
        _dispose(widget, app)
    print(path, file=sys.stdout)
    return 0


def _build(builder, trace, args, session):
    """Builders take (trace, args) or (trace, args, session); the session saves reloading the model."""
    import inspect

    try:
        takes_session = len(inspect.signature(builder).parameters) >= 3
    except (TypeError, ValueError):
        takes_session = False
    return builder(trace, args, session) if takes_session else builder(trace, args)


def _dispose(widget, app) -> None:
    # Delete the C++ widget now, while the QApplication is alive: left to interpreter shutdown,
    # pyqtgraph's scene can outlive the app and crash on exit.
    import shiboken6

    widget.close()
    if shiboken6.isValid(widget):
        shiboken6.delete(widget)
    app.processEvents()


def _check_colormap(name: str) -> None:
    from transformer_viewer.viewer.widgets.heatmap import get_colormap

    _qt_app()
    try:
        get_colormap(name)
    except ValueError as e:
        raise ModelError(f"--colormap: {e}") from None


# The issue-5 views (residual, mlp, logit-lens, scan, diff) register themselves here.
from transformer_viewer.viewer.cli import analysis_export  # noqa: E402
