"""The `patch` command's figures: a PatchGrid drawn by the window's patching view and written as
.png, .svg or .pdf, titled with the model, what was patched, the metric, both prompts (shortened),
the normalisation and any feature clamps, with the clean and corrupted metric and the grid's notes under it.

The figure is laid out at the size the manifest records (`manifest(size)`), as the window's
exports are, so that `transformer-viewer export --from-manifest` lays its own patching view out
the same."""

from __future__ import annotations

FIGURES = (".png", ".svg", ".pdf")
FIGURE_SIZE = (1000, 700)  # the patching view's layout size in a figure
FIGURE_SCALE = 2.0  # PNG pixels per logical pixel


def write_figure(grid, clean: str, corrupted: str, path: str, model: str = "", normalised: bool = True,
                 pairs_name: str = "", intervention=None, size: tuple[int, int] = FIGURE_SIZE,
                 scale: float = FIGURE_SCALE, theme: str = "light", manifest=None) -> str:
    """Draw `grid` (exact or an estimate) of the prompts `clean` and `corrupted` (or of a pairs
    file `pairs_name`, averaged), computed under `intervention` (its head mask and feature clamps,
    in both runs; None: nothing masked or clamped), in the patching view and export it to `path`; returns the path written.
    `manifest(laid_out)`: told the whole figure's size in logical pixels, returns the manifest
    text an SVG or PDF embeds ("": none)."""
    from transformer_viewer.viewer.cli.offscreen import dispose_widget, offscreen_app
    from transformer_viewer.viewer.export import export_view
    from transformer_viewer.viewer.export_layout import layout_size
    from transformer_viewer.viewer.figure import FigureStyle, figure_title
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.views.patching_view import PatchingView

    app = offscreen_app()
    state = ViewerState()
    state.set_patching(normalised=normalised, pairs_name=pairs_name)
    if intervention is not None:
        state.set_intervention(intervention)  # what the title and the mask line say
    view = PatchingView(state, worker=None)
    try:
        view.resize(*size)
        view.show()
        app.processEvents()
        view.set_result(grid, clean, corrupted)
        app.processEvents()
        title = figure_title(model, f"Patching: {view.title()}", state.mask, state.ablation)
        if state.clamps:  # as every other figure names them: "... — clamps 0:12=5, 0:7x0.5"
            title += " \u2014 clamp" + ("s " if len(state.clamps) != 1 else " ") + ", ".join(
                c.describe() for c in state.clamps)
        style = FigureStyle(theme=theme, title=title, notes=tuple(view.figure_notes()))
        laid_out = layout_size(view, style)
        if manifest is not None:
            from dataclasses import replace

            style = replace(style, manifest=manifest(laid_out))
        return export_view(view, path, scale=scale if path.lower().endswith(".png") else 1.0, size=laid_out,
                           style=style)
    finally:
        dispose_widget(view, app)
