"""The `patch` command's figures: a PatchGrid drawn by the window's patching view and written as
.png, .svg or .pdf, titled with the model, what was patched, the metric, both prompts (shortened),
the normalisation and any feature clamps, with the clean and corrupted metric and the grid's notes under it."""

from __future__ import annotations

FIGURES = (".png", ".svg", ".pdf")
FIGURE_SIZE = (1000, 700)  # the patching view's layout size in a figure


def write_figure(grid, clean: str, corrupted: str, path: str, model: str = "", normalised: bool = True,
                 pairs_name: str = "", intervention=None, size: tuple[int, int] = FIGURE_SIZE, scale: float = 2.0,
                 theme: str = "light") -> str:
    """Draw `grid` (exact or an estimate) of the prompts `clean` and `corrupted` (or of a pairs
    file `pairs_name`, averaged), computed under `intervention` (its head mask and feature clamps,
    in both runs; None: nothing masked or clamped), in the patching view and export it to `path`; returns the path written."""
    from transformer_viewer.viewer.cli.export import _dispose, _qt_app
    from transformer_viewer.viewer.export import export_view
    from transformer_viewer.viewer.figure import FigureStyle, figure_title
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.views.patching_view import PatchingView

    app = _qt_app()
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
        return export_view(view, path, scale=scale if path.lower().endswith(".png") else 1.0, style=style)
    finally:
        _dispose(view, app)
