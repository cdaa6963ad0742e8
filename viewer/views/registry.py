"""Every view of the app in one table: the window builds its docks and tabs from it, and
`transformer-viewer export` offers its `--view` choices from it.

An entry names the view, says where it sits, which widget class builds it (from the shared
`ViewerState`, plus the worker when the view asks for its own computation), and, for a view
the export command can write, how that command's arguments set it up. The widget module is
imported only when the view is built, so neither the command line nor this table pulls in Qt.
Adding a view is its widget, its entry here and (for a worker-computed one) its request
module: see docs/DEVELOPING.md.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from transformer_viewer.model.errors import ModelError

PLACES = ("top", "left", "center", "tab", "right", "right-below")


@dataclass(frozen=True)
class ViewEntry:
    title: str  # dock or tab title, as listed in the View menu
    widget: str  # "module:Class"; the class takes (state) or, with uses_worker, (state, worker)
    place: str  # top: under the prompt; left/right: side columns; center: the first middle tab;
    # tab: another middle tab; right-below: under the right column's first view
    uses_worker: bool = False
    export_name: str | None = None  # `export --view NAME`; None: not exportable
    export_size: tuple[int, int] | None = (900, 820)  # layout size for export; None: the widget's sizeHint
    configure: Callable | None = None  # configure(view, args): apply the export command's arguments
    needs_trace: bool = False  # a middle tab that draws from the trace: covered by a message until one exists

    def __post_init__(self) -> None:
        if self.place not in PLACES:
            raise ValueError(f"view {self.title!r}: place must be one of {', '.join(PLACES)}, got {self.place!r}")

    def widget_class(self) -> type:
        module, _, name = self.widget.partition(":")
        return getattr(importlib.import_module(module), name)

    def build(self, state, worker=None):
        cls = self.widget_class()
        return cls(state, worker) if self.uses_worker else cls(state)


# -- what the export command's arguments do to each view -------------------------------------
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


def _needs_mask_for_diff(view, args) -> None:
    if args.diff and not view.state.is_masked:
        raise ModelError("--diff shows masked minus clean: mask a head with --mask L.H "
                         "(with nothing masked the difference is exactly zero)")


def _configure_residual(view, args) -> None:
    _needs_mask_for_diff(view, args)
    view.log_box.setChecked(bool(args.log))
    view.diff.setChecked(bool(args.diff))


def _configure_mlp(view, args) -> None:
    if args.rows < 1:
        raise ModelError(f"--rows must be at least 1, got {args.rows}")
    _needs_mask_for_diff(view, args)
    view.rows_spin.setValue(args.rows)
    view.set_sort(args.sort)
    view.diff.setChecked(bool(args.diff))


def _configure_lens(view, args) -> None:
    _needs_mask_for_diff(view, args)
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
    if not view.state.is_masked:
        print("note: nothing is masked (--mask L.H), so the difference is exactly zero", file=sys.stderr)


_V = "transformer_viewer.viewer.views"
VIEWS: tuple[ViewEntry, ...] = (
    ViewEntry("Tokens", f"{_V}.token_strip:TokenStrip", "top", uses_worker=True),
    ViewEntry("Attention", f"{_V}.attention_panel:AttentionPanel", "center", uses_worker=True,
              export_name="attention", configure=_configure_attention),
    ViewEntry("All heads", f"{_V}.head_grid:HeadGridView", "left", export_name="grid", export_size=None,
              configure=_configure_grid),
    ViewEntry("Head mask", f"{_V}.mask_grid:MaskGrid", "left"),
    ViewEntry("Next token", f"{_V}.logits_panel:LogitsPanel", "right"),
    ViewEntry("Residual stream", f"{_V}.residual_view:ResidualView", "tab", export_name="residual",
              export_size=(1400, 480), configure=_configure_residual, needs_trace=True),
    ViewEntry("MLP neurons", f"{_V}.mlp_view:MLPView", "tab", uses_worker=True, export_name="mlp",
              export_size=(1100, 760), configure=_configure_mlp, needs_trace=True),
    ViewEntry("Logit lens", f"{_V}.lens_view:LensView", "tab", uses_worker=True, export_name="logit-lens",
              export_size=(1300, 520), configure=_configure_lens, needs_trace=True),
    ViewEntry("Head scan", f"{_V}.scan_view:ScanView", "tab", uses_worker=True, export_name="scan",
              export_size=(760, 560), configure=_configure_scan),
    ViewEntry("Attention diff", f"{_V}.diff_view:AttentionDiffView", "tab", uses_worker=True, export_name="diff",
              configure=_configure_diff, needs_trace=True),
    ViewEntry("Attribution", f"{_V}.attribution_view:AttributionView", "tab", uses_worker=True,
              export_name="attribution", export_size=(1100, 760), configure=_configure_attribution,
              needs_trace=True),
    ViewEntry("Routes", f"{_V}.routes_view:RoutesView", "tab", uses_worker=True, export_name="routes",
              export_size=(1000, 700), needs_trace=True),
    ViewEntry("Rollout", f"{_V}.rollout_view:RolloutView", "tab", uses_worker=True, export_name="rollout",
              export_size=(900, 700), needs_trace=True),
    ViewEntry("Continue", f"{_V}.generate_control:GenerateControl", "right-below", uses_worker=True),
)


def exportable() -> dict[str, ViewEntry]:
    """The views `transformer-viewer export` can write, by their --view name."""
    return {v.export_name: v for v in VIEWS if v.export_name is not None}


def title_of(view) -> str:
    """The registry's title of the view `view` is an instance of (its class's name if none)."""
    name = type(view).__name__
    for v in VIEWS:
        if v.widget.rpartition(":")[2] == name:
            return v.title
    return name


def entry(title: str) -> ViewEntry:
    for v in VIEWS:
        if v.title == title:
            return v
    raise KeyError(f"no view titled {title!r}")
