"""The issue-5 views for `transformer-viewer export`: residual, mlp, logit-lens, scan, diff.

Imported at the end of `viewer.cli.export`, which makes `register_view` add them to VIEWS and
`add_arguments` below add their options. Builders get (trace, args, session); a caller that
passes no session gets one loaded from args again. Qt and torch are imported only inside.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli import export as cli_export

SIZES = {"residual": (1400, 480), "mlp": (1100, 760), "logit-lens": (1300, 520), "scan": (760, 560),
         "diff": (900, 820)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("residual, mlp, logit-lens, scan and diff views")
    g.add_argument("--diff", action="store_true",
                   help="residual/mlp/logit-lens: show masked minus clean (needs --mask)")
    g.add_argument("--target", default=None, help="scan: target token (one GPT-2 token as text, or an id)")
    g.add_argument("--distractor", default=None, help="scan: measure logit(target) - logit(distractor)")
    g.add_argument("--show", default="effect", choices=["effect", "kl", "prob"],
                   help="scan: effect on the metric, KL divergence, or p(target) (default: effect)")
    g.add_argument("--sort", default="max", choices=["max", "token", "index"],
                   help="mlp: order neurons by max activation, activation on --query, or index (default: max)")
    g.add_argument("--rows", type=int, default=64, help="mlp: how many neurons to show (default: 64)")


def _state(trace, clean, session, args):
    from transformer_viewer.viewer.state import ModelInfo, ViewerState

    c, lm = session.config, session.loaded
    st = ViewerState()
    st.set_model(ModelInfo(name=lm.name, format=lm.format, source=lm.source, n_layer=c.n_layer, n_head=c.n_head,
                           n_embd=c.n_embd, block_size=c.block_size, n_params=int(lm.n_params),
                           device=str(session.device), n_mlp=c.n_mlp, vocab_size=c.vocab_size))
    st.set_mask(trace.mask)
    st.set_ablation(trace.ablation)
    st.set_traces(trace, clean)
    st.set_selection(layer=args.layer or 0, head=args.head or 0,
                     query=args.query if args.query is not None else trace.n_tokens - 1)
    return st


def _session(trace, args, session):
    """The export command's session, or a new one on the same prompt."""
    if session is not None:
        return session
    from transformer_viewer.model.session import Session
    from transformer_viewer.viewer.cli.common import load_from_args

    session = Session(load_from_args(args))
    session.set_prompt(args.prompt)
    session.run(trace.mask, trace.ablation)
    return session


def _clean(trace, session):
    """The unmasked trace of the same prompt (`trace` itself when nothing is masked)."""
    if not trace.mask.any():
        return trace
    return session.run(None, "zero", trace.next.position)


def _needs_mask_for_diff(trace, args) -> None:
    if getattr(args, "diff", False) and not trace.mask.any():
        raise ModelError("--diff shows masked minus clean: mask a head with --mask L.H "
                         "(with nothing masked the difference is exactly zero)")


def build_residual(trace, args, session=None):
    from transformer_viewer.viewer.widgets.residual_view import ResidualView

    session = _session(trace, args, session)
    _needs_mask_for_diff(trace, args)
    view = ResidualView(_state(trace, _clean(trace, session), session, args))
    view.log_box.setChecked(bool(args.log))
    view.diff.setChecked(bool(args.diff))
    return view


def build_mlp(trace, args, session=None):
    from transformer_viewer.viewer.widgets.mlp_view import MLPView

    if args.rows < 1:
        raise ModelError(f"--rows must be at least 1, got {args.rows}")
    session = _session(trace, args, session)
    _needs_mask_for_diff(trace, args)
    view = MLPView(_state(trace, _clean(trace, session), session, args))
    view.rows_spin.setValue(args.rows)
    view.set_sort(args.sort)
    view.diff.setChecked(bool(args.diff))
    return view


def build_lens(trace, args, session=None):
    from transformer_viewer.model.diff import lens_diff
    from transformer_viewer.model.lens import logit_lens
    from transformer_viewer.viewer.analysis_requests import LensResult
    from transformer_viewer.viewer.widgets.lens_view import LensView

    session = _session(trace, args, session)
    _needs_mask_for_diff(trace, args)
    clean_lens = logit_lens(session, session.masked_residuals())
    if trace.mask.any():
        lens = logit_lens(session, session.masked_residuals(trace.mask, trace.ablation),
                          reference_ids=clean_lens.top_ids)
        result = LensResult(lens, clean_lens, lens_diff(clean_lens, lens), trace.mask.copy(), args.prompt)
    else:
        result = LensResult(clean_lens, clean_lens, np.zeros_like(clean_lens.top_probs), trace.mask.copy(), args.prompt)
    view = LensView(_state(trace, _clean(trace, session), session, args))
    view.set_label_function(session.tokenizer.label)
    view.diff.setChecked(bool(args.diff))
    view.set_result(result)
    return view


def build_scan(trace, args, session=None):
    from tqdm import tqdm

    from transformer_viewer.model.scan import head_scan
    from transformer_viewer.model.tokenizer import parse_token
    from transformer_viewer.viewer.widgets.scan_view import ScanView

    session = _session(trace, args, session)
    target = parse_token(args.target, session.tokenizer, session.n_vocab, "--target")
    distractor = parse_token(args.distractor, session.tokenizer, session.n_vocab, "--distractor")
    bar = tqdm(total=0, unit="head", file=sys.stderr, leave=False, dynamic_ncols=True)

    def progress(done, total):
        bar.total, bar.n = total, done
        bar.refresh()
    try:
        result = head_scan(session, target=target, distractor=distractor, position=args.query,
                           ablation=trace.ablation, base_mask=trace.mask, progress=progress)
    finally:
        bar.close()
    view = ScanView(_state(trace, trace, session, args))
    view._tokenizer = session.tokenizer
    view.shown_combo.setCurrentIndex(view.shown_combo.findData(args.show))
    view.set_result(result)
    return view


def build_diff(trace, args, session=None):
    from transformer_viewer.viewer.widgets.diff_view import AttentionDiffView

    session = _session(trace, args, session)
    if not trace.mask.any():
        print("note: nothing is masked (--mask L.H), so the difference is exactly zero", file=sys.stderr)
    return AttentionDiffView(_state(trace, _clean(trace, session), session, args))


for _name, _builder in (("residual", build_residual), ("mlp", build_mlp), ("logit-lens", build_lens),
                        ("scan", build_scan), ("diff", build_diff)):
    cli_export.register_view(_name, _builder, SIZES[_name])
