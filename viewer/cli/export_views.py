"""What `transformer-viewer export`'s arguments do to each view it can write, by view id.

`configure_view(view_id, view, args)` applies `--mode`, `--colormap`, `--log`, `--diff`,
`--rows`, `--target` ... to a view the export command has built; a view without an entry here
takes no arguments beyond the common ones. `apply_region` zooms a laid-out view's heatmap to
`--region`. The views registry (viewer/views/registry.py) says
what a view is and where it sits; the arguments of one command are this module's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from transformer_viewer.model.errors import ModelError


def _configure_attention(view, args) -> None:
    from transformer_viewer.viewer.views.attention_panel import MODES

    if args.mode not in MODES:
        raise ModelError(f"--mode {args.mode}: use one of {', '.join(MODES)}")
    view.set_mode(args.mode)
    view.set_colormap(args.colormap)
    view.set_log_scale(args.log)
    if args.query is None:
        view.set_query(None)  # an export highlights a row only when asked to


def _configure_grid(view, args) -> None:
    view.set_colormap(args.colormap)
    view.set_log_scale(args.log)
    if args.layer is None or args.head is None:
        view.set_selected(None)


def _needs_intervention_for_diff(view, args) -> None:
    if args.diff and view.state.intervention.is_empty:
        raise ModelError("--diff shows the intervened run minus the clean one: mask a head or clamp a feature "
                         "(--mask L.H, or --sae PATH --clamp F=V); with neither the difference is exactly zero")


def _configure_residual(view, args) -> None:
    _needs_intervention_for_diff(view, args)
    view.log_box.setChecked(bool(args.log))
    view.diff.setChecked(bool(args.diff))


def _configure_mlp(view, args) -> None:
    if args.rows < 1:
        raise ModelError(f"--rows must be at least 1, got {args.rows}")
    _needs_intervention_for_diff(view, args)
    view.rows_spin.setValue(args.rows)
    view.set_sort(args.sort)
    view.diff.setChecked(bool(args.diff))


def _configure_lens(view, args) -> None:
    _needs_intervention_for_diff(view, args)
    view.diff.setChecked(bool(args.diff))


def _configure_scan(view, args) -> None:
    view.shown_combo.setCurrentIndex(view.shown_combo.findData(args.show))
    view.target_edit.setText(args.target or "")
    view.distractor_edit.setText(args.distractor or "")
    view.start(names=("--target", "--distractor"))


def _configure_attribution(view, args) -> None:
    if args.target or args.distractor:  # the logit of --target, minus --distractor's
        view.set_tokens(args.target, args.distractor)


def _configure_diff(view, _args) -> None:
    if not view.state.is_masked and not view.state.clamps:
        print("note: nothing is masked (--mask L.H) or clamped (--clamp), so the difference is exactly zero",
              file=sys.stderr)


def _configure_patching(view, args) -> None:
    view.estimate_only = bool(args.estimate)  # attribution patching's estimate alone: no exact grid after it
    view.show_estimate.setChecked(bool(args.estimate))  # the estimate drawn instead of the exact grid


CONFIGURE: dict[str, Callable] = {
    "attention": _configure_attention,
    "grid": _configure_grid,
    "residual": _configure_residual,
    "mlp": _configure_mlp,
    "logit-lens": _configure_lens,
    "scan": _configure_scan,
    "diff": _configure_diff,
    "patching": _configure_patching,
    "attribution": _configure_attribution,
}


def apply_region(view_id: str, view, region: tuple[float, float, float, float]) -> None:
    """Zoom the view's heatmap to `region` (x0, x1, y0, y1 in its cells): what `--region` draws."""
    from transformer_viewer.viewer.views.heatmap import main_heatmap

    heatmap = main_heatmap(view)
    if heatmap is None:
        raise ModelError(f"--region: the {view_id} view has no heatmap to zoom; leave --region out")
    R, C = heatmap.token_size()
    x0, x1, y0, y1 = region
    if x0 < 0 or y0 < 0 or x1 > C or y1 > R:
        raise ModelError(f"--region {x0:g},{x1:g},{y0:g},{y1:g} is outside the heatmap's {C} columns and {R} rows; "
                         f"give X0,X1 within 0..{C} and Y0,Y1 within 0..{R}")
    heatmap.view.setRange(xRange=(x0, x1), yRange=(y0, y1), padding=0)


def configure_view(view_id: str, view, args) -> None:
    """Apply the export command's arguments to the view `view_id` (its registry id)."""
    configure = CONFIGURE.get(view_id)
    if configure is not None:
        configure(view, args)
