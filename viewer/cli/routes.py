"""`transformer-viewer routes [CHECKPOINT] --prompt TEXT [--position P] [--threshold X]
[--no-renormalize] [--mask L.H ...] [--ablation zero|mean] [--sae PATH[@HOOK] ... --clamp SPEC ...]
[--json | --out FILE.json|.svg|.pdf|.png]`: the information-flow routes (Ferrando & Voita 2024)
from one position down to the input tokens, in the run with the heads ablated and the SAE
features clamped (each clamp folded into the part of its layer whose output its SAE reads).
`--out` with .svg, .pdf or .png writes the graph as the window's Routes tab draws it.

`--json` prints {"model", "source", "prompt", "tokens", "position", "threshold", "renormalized",
"nodes": [{"id", "kind", "layer", "position"}...], "edges": [{"source", "target", "kind",
"contribution", "heads"?}...], "token_share": [...], "expanded", "clamps": ["SAE:FEATURE=VALUE"...]}; see model/analysis/routes.py
for what each means.
"""

from __future__ import annotations

import argparse
import sys

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import (
    add_ablation_argument,
    add_checkpoint_arguments,
    add_session_argument,
)
from transformer_viewer.viewer.cli.sae_options import add_clamp_argument, add_sae_argument

FIGURES = (".svg", ".pdf", ".png")
FIGURE_SIZE = (1000, 700)  # the export command's size for the Routes view


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    p.add_argument("--prompt", default=None, help="the text to run (or the one a --session ran)")
    add_session_argument(p)
    p.add_argument("--position", type=int, default=None,
                   help="position the routes lead to, 0-based; negative counts from the end (default: the last)")
    p.add_argument("--threshold", type=float, default=0.04,
                   help="contributions at or below this are dropped (default: 0.04, as the LLM Transparency Tool)")
    p.add_argument("--no-renormalize", dest="renormalize", action="store_false",
                   help="keep the contributions left after the threshold as they are (default: rescale them to "
                        "sum to 1 at each node)")
    p.add_argument("--mask", nargs="+", action="extend", default=[], metavar="L.H",
                   help="ablate head H of layer L in the run, e.g. 3.1 or 0.*")
    add_ablation_argument(p)
    add_sae_argument(p, required=False)
    add_clamp_argument(p)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the graph as one JSON object")
    out.add_argument("--out", default=None,
                     help="write the graph to FILE.json, or its figure to FILE.svg, FILE.pdf or FILE.png")


def run(args) -> int:
    from transformer_viewer.viewer.cli.common import (
        TerminalBar,
        check_mask_syntax,
        intervention_from_args,
        session_arguments,
        session_for_prompt,
        write_json_or_print,
    )

    session_arguments(args)  # --session: the checkpoint, prompt, mask, SAEs and clamps it saved
    if not 0.0 <= args.threshold < 1.0:
        raise ModelError(f"--threshold {args.threshold}: give a contribution from 0 up to (not including) 1")
    figure = args.out is not None and args.out.lower().endswith(FIGURES)
    if args.out is not None and not (figure or args.out.lower().endswith(".json")):
        raise ModelError(f"--out {args.out}: the routes are written as .json, or drawn as .svg, .pdf or .png")
    if args.out is not None:
        from transformer_viewer.viewer.export import check_writable

        check_writable(args.out)
    check_mask_syntax(args.mask)
    from transformer_viewer.viewer.cli.sae_options import attach_saes, check_sae_syntax, clamps_from_args

    check_sae_syntax(args)
    session = session_for_prompt(args)
    attach_saes(args, session)
    intervention = intervention_from_args(args, session.config, clamps=clamps_from_args(args, len(session.tokens.ids)))
    from transformer_viewer.model.analysis.routes import information_routes

    with TerminalBar("layer", after_s=0.5) as bar:
        r = information_routes(session, position=args.position, threshold=args.threshold,
                               renormalize=args.renormalize, intervention=intervention,
                               step=lambda i, n: bar.update(i, n, "routes"))
    if figure:
        print(f"wrote {write_figure(r, session.tokens.labels, args.out)}", file=sys.stderr)
        return 0
    obj = dict(r.to_json(), model=session.loaded.name, source=session.loaded.source, prompt=session.tokens.text,
               tokens=list(session.tokens.labels), clamps=[c.describe() for c in intervention.clamps])
    if args.json or args.out is not None:
        write_json_or_print(obj, args.out)
    else:
        print(format_text(r, session))
    return 0


def write_figure(routes, labels, path: str, size: tuple[int, int] = FIGURE_SIZE) -> str:
    """Draw `routes` over the token `labels` in the Routes tab's widget and export it to `path`
    (.svg, .pdf or .png) as the window would; returns the path written."""
    from transformer_viewer.viewer.cli.offscreen import dispose_widget, offscreen_app
    from transformer_viewer.viewer.export import export_view
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.views.routes_view import RoutesView

    app = offscreen_app()
    view = RoutesView(ViewerState(), worker=None)
    try:
        view.resize(*size)
        view.show()
        app.processEvents()
        view.set_result(routes, labels)
        app.processEvents()
        return export_view(view, path)
    finally:
        dispose_widget(view, app)


def format_text(r, session) -> str:
    labels = session.tokens.labels
    lines = [f"routes to position {r.position} ({labels[r.position]}), threshold {r.threshold:g}"
             f"{', renormalised' if r.renormalized else ''}: {len(r.nodes)} nodes, {len(r.edges)} edges, "
             f"{r.expanded} nodes expanded",
             "each token's share of the route (the sum over paths of the products of edge contributions):"]
    order = sorted(range(len(labels)), key=lambda i: -r.token_share[i])
    for i in order:
        if r.token_share[i] <= 0:
            break
        lines.append(f"  {i:>5} {labels[i]!r:<16} {r.token_share[i]:.4f}")
    return "\n".join(lines)
