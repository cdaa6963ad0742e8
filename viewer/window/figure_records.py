"""What the window remembers of each export: FILE.manifest.json beside it when asked (the same
manifest `transformer-viewer export --write-manifest` writes, so `export --from-manifest`
regenerates it), and a FigureRecord in `window.exported_figures`, which a saved session lists.

Every export of the window goes through `viewer/window/actions.py`'s `export` and then
`record_export` here: File > Export and each view's own Export button alike. The manifest's
`export` part is the export command's arguments that build the same view in the same state: the
selection (layer, head, query), each view's own settings as `viewer/cli/export_views.py`
applies them (`view_settings` reads them back from the window's view) and the part of its
heatmap a zoomed view shows (`region`, `zoom_region`). A figure is laid out at the view's
on-screen size, and the manifest records that size (`size`: the whole figure, its title and
note bands included) and the PNG's pixels per logical pixel (`scale`), so the export command
lays its own view out at exactly that size: on the same machine the PNG it regenerates is the
same pixels and an SVG the same bytes outside an embedded manifest. What the export command's
arguments cannot say (a long prompt's overview zoomed in, a marked key column, an overview
pooled by its mean, the rollout's and the routes' own settings) is listed by
`regeneration_notes`, which the export dialog shows before anything is written; the mouse's
hover is drawn in no figure.

The window's heatmap data (.npy/.csv) is the matrix it draws, the trace's overview: its
manifest says `pooled`, which is what the export command writes for the same request; the
head's full pattern (File > Export > "Current head's full pattern") is the export command's
exact attention data, and its manifest says so. The patching view's manifest also holds its
experiment (the `patching` part, from viewer/patch_setup.py's PatchSetup: the corrupted prompt,
the metric and its tokens, what is patched ...) and whether the estimate is shown (`estimate`);
its data is the shown grid's raw metric, as the export command writes it. What the export
command cannot rebuild (a view it does not export; the patching view averaging a pairs file) is
exported without a manifest, and the export dialog says why (`no_manifest`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from transformer_viewer.model.sessions.figure_manifest import (
    ExportRecord,
    file_sha256,
    manifest_text,
    write_manifest,
)
from transformer_viewer.model.sessions.figures_part import FigureRecord
from transformer_viewer.model.sessions.prompt_part import PromptRecord

FIGURE_FORMATS = (".png", ".svg", ".pdf")
ROUTES_THRESHOLD_STEP = 8  # the routes view's threshold slider as it is built (0.04)
NOT_EXPORTABLE = "No manifest: the export command does not export this view."
PAIRS_NOT_REGENERABLE = ("No manifest: a manifest regenerates one prompt pair's grid, not a pairs file's average "
                         "(`transformer-viewer patch --pairs FILE --out` writes that).")


@dataclass(frozen=True)
class ViewSettings:
    """The export command's view arguments, as a window's view is set now (see export_views.py)."""

    mode: str = "head"
    colormap: str = "viridis"
    log: bool = False
    diff: bool = False
    target: str | None = None
    distractor: str | None = None
    show: str = "effect"
    sort: str = "max"
    rows: int = 64


def no_manifest(view_id: str, state) -> str:
    """Why `transformer-viewer export --view VIEW_ID` cannot rebuild this view from a manifest as
    `state` has it now, in one line for the export dialog; "" when it can."""
    from transformer_viewer.viewer.views.registry import exportable

    if view_id not in exportable():
        return NOT_EXPORTABLE
    if view_id == "patching" and state.patching.pairs:
        return PAIRS_NOT_REGENERABLE
    return ""


def regenerable(view_id: str, state) -> bool:
    """Whether a manifest can regenerate an export of this view as `state` has it now."""
    return not no_manifest(view_id, state)


def view_settings(view_id: str, view) -> ViewSettings:
    """What `configure_view` would have to set on a freshly built `view_id` for it to draw as
    `view` draws now."""
    if view_id == "attention":
        return ViewSettings(mode=view.mode(), colormap=view.heatmap.colormap_name(), log=view.heatmap.log_scale())
    if view_id == "grid":
        return ViewSettings(colormap=view.colormap_name(), log=view.log_scale())
    if view_id == "residual":
        return ViewSettings(log=view.log_box.isChecked(), diff=view.diff.isChecked())
    if view_id == "mlp":
        return ViewSettings(diff=view.diff.isChecked(), sort=view.sort_combo.currentData(), rows=view.rows_spin.value())
    if view_id == "logit-lens":
        return ViewSettings(diff=view.diff.isChecked())
    if view_id == "scan":
        return ViewSettings(show=view.shown_combo.currentData(), target=view.target_edit.text().strip() or None,
                            distractor=view.distractor_edit.text().strip() or None)
    if view_id == "attribution":  # the token ids split, as `--target`/`--distractor` take them
        tokens = tuple(str(t) for t in view.tokens)
        return ViewSettings(target=tokens[0] if tokens else None, distractor=tokens[1] if len(tokens) > 1 else None)
    return ViewSettings()


def zoom_region(view) -> tuple[float, float, float, float] | None:
    """The part (x0, x1, y0, y1) of the view's heatmap in view when it is zoomed in, for the
    manifest's `region`; None when it shows all of it, or when it is a long prompt's pooled
    overview (the full-resolution tile drawn over a zoomed overview comes later, from the worker,
    and a regenerated figure would not wait for it)."""
    from transformer_viewer.viewer.views.heatmap import main_heatmap

    heatmap = main_heatmap(view)
    if heatmap is None or not heatmap.is_zoomed() or heatmap.cell() > 1:
        return None
    (x0, x1), (y0, y1) = heatmap.view.viewRange()
    R, C = heatmap.token_size()
    return max(0.0, float(x0)), min(float(C), float(x1)), max(0.0, float(y0)), min(float(R), float(y1))


def regeneration_notes(view_id: str, view) -> tuple[str, ...]:
    """What a figure regenerated from this view's manifest shows differently from the window:
    the window's state the export command's arguments cannot say."""
    from transformer_viewer.viewer.views.heatmap import HeatmapView, main_heatmap

    notes = []
    heatmaps = view.findChildren(HeatmapView) if not isinstance(view, HeatmapView) else [view]
    recorded = zoom_region(view)
    if any(h.is_zoomed() for h in heatmaps if recorded is None or h is not main_heatmap(view)):
        notes.append("the heatmap is zoomed in here; regenerated from the manifest it is drawn whole")
    if any(getattr(h, "highlighted_col", lambda: None)() is not None for h in heatmaps):
        notes.append("a key column is marked here; regenerated from the manifest it is not")
    pooled = any(h.cell() > 1 for h in heatmaps)
    if view_id == "attention" and pooled and view.pooling() != "max":
        notes.append(f"the overview pools each block by its {view.pooling()} here; regenerated from the manifest "
                     "by its max")
    if view_id == "rollout" and (view.first_layer.value() != 0 or view.last_layer.value() != view.state.n_layer - 1
                                 or view.heads.currentData() != "mean" or not view.residual.isChecked()):
        notes.append("the rollout's layers, heads or residual are set here; regenerated from the manifest it rolls "
                     "out every layer's mean head with the residual")
    if view_id == "routes" and (view.threshold.value() != ROUTES_THRESHOLD_STEP or not view.renormalize.isChecked()
                                or view.position is not None):
        notes.append("the routes' threshold, renormalisation or position is set here; regenerated from the manifest "
                     "they take their defaults and lead to the query")
    return tuple(notes)


def export_record(window, view_id: str, view, path: str, scale: float, theme: str, size, embed: bool = False,
                  private: bool = False, sha256: str = "") -> ExportRecord:
    """The manifest's `export` part for `view` (the window's view `view_id`) written to `path`;
    `size`: the figure's laid-out size in logical pixels (None for data)."""
    from transformer_viewer.viewer.export import extension

    st = window.state
    ext = extension(path)
    figure = ext in FIGURE_FORMATS
    s = view_settings(view_id, view)
    layer, head = st.layer, st.head
    if view_id == "grid" and view.selected() is None:
        layer = head = None  # nothing marked in the grid
    query = st.query_index
    if view_id == "attention" and view.heatmap.highlighted_row() is None:
        query = None  # no row highlighted
    estimate = False
    if view_id == "patching":  # the experiment is the `patching` part; --layer is heads-by-pos's layer
        p = st.patching
        layer, head, query = (p.layer if p.what == "heads-by-pos" else None), None, None
        estimate = view.estimate is not None and view.shown_grid() is view.estimate
    return ExportRecord(
        view=view_id, out_format=ext, layer=layer, head=head, query=query, mode=s.mode, colormap=s.colormap,
        log=s.log, theme=theme, scale=round(float(scale), 6) if ext == ".png" else None,
        size=tuple(int(v) for v in size) if figure and size is not None else None,
        pooled=view_id == "attention" and not figure, diff=s.diff, target=s.target, distractor=s.distractor,
        show=s.show, sort=s.sort, rows=s.rows, region=zoom_region(view) if figure else None,
        file=os.path.basename(path), sha256=sha256, embed=embed, private=private, estimate=estimate)


def manifest_records(window, export: ExportRecord) -> dict:
    """The manifest's records: the window's checkpoint, intervention (the mask and feature
    clamps), the SAEs the clamps name, the environment, its prompt, and `export` (and, for the
    patching view, its experiment)."""
    from transformer_viewer.viewer.window.session_binding import capture

    session = capture(window)
    parts = ("checkpoint", "intervention", "saes", "environment") + (("patching",) if export.view == "patching" else ())
    records = {k: session[k] for k in parts if k in session}
    records.update(prompt=PromptRecord(window.state.prompt), export=export)
    return records


def embedded_manifest(window, view_id: str, view, path: str, scale: float, theme: str, size,
                      private: bool) -> str:
    """The manifest text an SVG or PDF holds in its metadata (no file name, no sha256: the file
    holding it cannot hash itself)."""
    export = export_record(window, view_id, view, path, scale, theme, size, embed=True, private=private)
    from dataclasses import replace

    return manifest_text(manifest_records(window, replace(export, file="")), private=private)


def record_export(window, view_id: str, view, path: str, scale: float, theme: str, size, manifest: bool,
                  private: bool, embed: bool = False, **exact) -> str | None:
    """After `path` was written from the window's view `view_id`: FILE.manifest.json beside it
    when `manifest` (and the view can be regenerated), and the export listed in
    `window.exported_figures`. `exact`: ExportRecord fields that differ from the view's own (the
    head's full pattern: `pooled=False, mode="head"`). Returns the manifest's path, or None."""
    from dataclasses import replace

    written = None
    if manifest and regenerable(view_id, window.state):
        export = replace(export_record(window, view_id, view, path, scale, theme, size, embed=embed, private=private,
                                       sha256=file_sha256(path)), **exact)
        written = write_manifest(path, manifest_records(window, export), private=private)
    window.exported_figures.append(FigureRecord(os.path.abspath(path), view_id, written))
    return written
