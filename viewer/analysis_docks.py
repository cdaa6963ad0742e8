"""The issue-5 views as docks of the main window: residual stream, MLP neurons, logit lens,
head scan, attention diff, and the Continue (generation) bar.

`install_analysis_docks(window, state, worker)` is the one call the main window makes; it
registers the worker handlers (by name: no torch on the GUI thread), builds the views and
places them: as tabs beside the attention heatmap where the window offers `add_view_tab`,
else as docks tabbed together at the bottom; the Continue controls are a dock under "Next token".
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, QTimer

VIEWS = ("Residual stream", "MLP neurons", "Logit lens", "Head scan", "Attention diff")
CONTINUE_DOCK = "Continue"
DOCK_HEIGHT = 310


@dataclass
class AnalysisViews:
    residual: object
    mlp: object
    lens: object
    scan: object
    diff: object
    generate: object

    def all(self) -> dict:
        return dict(zip((*VIEWS, CONTINUE_DOCK),
                        (self.residual, self.mlp, self.lens, self.scan, self.diff, self.generate), strict=True))


def install_analysis_docks(window, state=None, worker=None) -> AnalysisViews:
    import transformer_viewer.viewer.analysis_requests  # noqa: F401 - registers the handlers
    from transformer_viewer.viewer.widgets.diff_view import AttentionDiffView
    from transformer_viewer.viewer.widgets.generate_control import GenerateControl
    from transformer_viewer.viewer.widgets.lens_view import LensView
    from transformer_viewer.viewer.widgets.mlp_view import MLPView
    from transformer_viewer.viewer.widgets.residual_view import ResidualView
    from transformer_viewer.viewer.widgets.scan_view import ScanView

    state = state if state is not None else window.state
    worker = worker if worker is not None else window.worker
    views = AnalysisViews(
        residual=ResidualView(state),
        mlp=MLPView(state),
        lens=LensView(state, worker),
        scan=ScanView(state, worker),
        diff=AttentionDiffView(state),
        generate=GenerateControl(state, worker, run_prompt=getattr(window, "run_prompt", None)),
    )
    views.lens.set_label_function(lambda i: state.tokenizer().label(i))  # the loaded model's, whichever it is
    big = dict(zip(VIEWS, (views.residual, views.mlp, views.lens, views.scan, views.diff), strict=True))
    if hasattr(window, "add_view_tab"):
        # Tabs beside the attention heatmap: these views need the room of the middle.
        for title, view in big.items():
            window.add_view_tab(title, view)
    else:
        first = None
        for title, view in big.items():
            window.add_view_dock(title, view, Qt.BottomDockWidgetArea, tabify_with=first)
            first = first or title
        window.docks[first].raise_()
        QTimer.singleShot(0, lambda: window.resizeDocks([window.docks[first]], [DOCK_HEIGHT], Qt.Vertical))
    # Continue extends the prompt from the model's predictions: it sits under "Next token".
    cont = window.add_view_dock(CONTINUE_DOCK, views.generate, Qt.RightDockWidgetArea)
    next_dock = getattr(window, "docks", {}).get("Next token")
    if next_dock is not None:
        window.splitDockWidget(next_dock, cont, Qt.Vertical)
        QTimer.singleShot(0, lambda: window.resizeDocks([cont], [cont.minimumSizeHint().height()], Qt.Vertical))
    window.analysis = views
    return views


def show_view(window, title: str) -> None:
    """Bring the analysis view `title` to the front (its tab, or its dock)."""
    view = window.analysis.all()[title]
    tabs = getattr(window, "tabs", None)
    if tabs is not None and tabs.indexOf(view) >= 0:
        tabs.setCurrentWidget(view)
    elif title in getattr(window, "docks", {}):
        window.docks[title].show()
        window.docks[title].raise_()
