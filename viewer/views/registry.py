"""Every view of the app in one table: the window builds its docks and tabs from it, and
`transformer-viewer export` offers its `--view` choices from it.

An entry names the view (a stable `id` that code and tests look it up by, and a `title` shown
to the user), says where it sits, which widget class builds it (from the shared `ViewerState`,
plus the worker when the view asks for its own computation), and whether the export command
can write it; what that command's arguments do to a view is viewer/cli/export_views.py's. The
widget module is imported only when the view is built, so neither the command line nor this
table pulls in Qt.

Adding a view is its widget, its entry here and (for a worker-computed one) its request
module: see docs/DEVELOPING.md.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

PLACES = ("top", "left", "center", "tab", "tab-on-demand", "right", "right-below")


@dataclass(frozen=True)
class ViewEntry:
    id: str  # stable name: the window's and the tests' key, and `export --view ID`; never shown
    title: str  # dock or tab title, as listed in the View menu; for display only
    widget: str  # "module:Class"; the class takes (state) or, with uses_worker, (state, worker)
    place: str  # top: under the prompt; left/right: side columns; center: the first middle tab;
    # tab: another middle tab; tab-on-demand: a middle tab hidden until shown (show_view);
    # right-below: under the right column's first view
    uses_worker: bool = False
    export: bool = False  # `transformer-viewer export --view ID` can write it
    export_size: tuple[int, int] | None = (900, 820)  # layout size for export; None: the widget's sizeHint
    needs_trace: bool = False  # a middle tab that draws from the trace: covered by a message until one exists

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9-]*", self.id):
            raise ValueError(f"view {self.title!r}: an id is lower-case words joined by '-', got {self.id!r}")
        if self.place not in PLACES:
            raise ValueError(f"view {self.title!r}: place must be one of {', '.join(PLACES)}, got {self.place!r}")

    def widget_class(self) -> type:
        module, _, name = self.widget.partition(":")
        return getattr(importlib.import_module(module), name)

    def build(self, state, worker=None):
        cls = self.widget_class()
        return cls(state, worker) if self.uses_worker else cls(state)


_V = "transformer_viewer.viewer.views"
VIEWS: tuple[ViewEntry, ...] = (
    ViewEntry("tokens", "Tokens", f"{_V}.token_strip:TokenStrip", "top", uses_worker=True),
    ViewEntry("corrupted-prompt", "Corrupted prompt", f"{_V}.corrupted_prompt:CorruptedPrompt", "top"),
    ViewEntry("attention", "Attention", f"{_V}.attention_panel:AttentionPanel", "center", uses_worker=True,
              export=True),
    ViewEntry("grid", "All heads", f"{_V}.head_grid:HeadGridView", "left", export=True, export_size=None),
    ViewEntry("head-mask", "Head mask", f"{_V}.mask_grid:MaskGrid", "left"),
    ViewEntry("next-token", "Next token", f"{_V}.logits_panel:LogitsPanel", "right"),
    ViewEntry("residual", "Residual stream", f"{_V}.residual_view:ResidualView", "tab", export=True,
              export_size=(1400, 480), needs_trace=True),
    ViewEntry("mlp", "MLP", f"{_V}.mlp_view:MLPView", "tab", uses_worker=True, export=True,
              export_size=(1100, 760), needs_trace=True),
    ViewEntry("logit-lens", "Logit lens", f"{_V}.lens_view:LensView", "tab", uses_worker=True, export=True,
              export_size=(1300, 520), needs_trace=True),
    ViewEntry("scan", "Head scan", f"{_V}.scan_view:ScanView", "tab", uses_worker=True, export=True,
              export_size=(760, 560)),
    ViewEntry("diff", "Attention diff", f"{_V}.diff_view:AttentionDiffView", "tab", uses_worker=True, export=True,
              needs_trace=True),
    ViewEntry("attribution", "Attribution", f"{_V}.attribution_view:AttributionView", "tab", uses_worker=True,
              export=True, export_size=(1100, 760), needs_trace=True),
    ViewEntry("routes", "Routes", f"{_V}.routes_view:RoutesView", "tab", uses_worker=True, export=True,
              export_size=(1000, 700), needs_trace=True),
    ViewEntry("patching", "Patching", f"{_V}.patching_view:PatchingView", "tab", uses_worker=True, export=True,
              export_size=(1000, 700), needs_trace=True),
    ViewEntry("rollout", "Rollout", f"{_V}.rollout_view:RolloutView", "tab", uses_worker=True, export=True,
              export_size=(900, 700), needs_trace=True),
    ViewEntry("features", "SAE feature", f"{_V}.feature_view:FeatureView", "tab-on-demand", uses_worker=True),
    ViewEntry("token-features", "SAE features", f"{_V}.features_panel:FeaturesPanel", "right-below",
              uses_worker=True),
    ViewEntry("continue", "Continue", f"{_V}.generate_control:GenerateControl", "right-below", uses_worker=True),
)
if len({v.id for v in VIEWS}) != len(VIEWS):
    raise RuntimeError("two views share an id in VIEWS")


def exportable() -> dict[str, ViewEntry]:
    """The views `transformer-viewer export` can write, by their id (the --view name)."""
    return {v.id: v for v in VIEWS if v.export}


def title_of(view) -> str:
    """The registry's title of the view `view` is an instance of (its class's name if none)."""
    name = type(view).__name__
    for v in VIEWS:
        if v.widget.rpartition(":")[2] == name:
            return v.title
    return name


def entry(view_id: str) -> ViewEntry:
    """The view with this id."""
    for v in VIEWS:
        if v.id == view_id:
            return v
    raise KeyError(f"no view with the id {view_id!r}")
