"""Pieces the analysis views share: the diff toggle, an export button, a depth line plot.

Every analysis view has `export_target()` (the part of it that PNG/SVG render), `matrix()`,
`row_labels()` and `col_labels()` (what .npy/.csv write: its main heatmap), so
`viewer.export.export_view` and `transformer-viewer export` treat it like the attention heatmap.
"""

from __future__ import annotations

import os

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from transformer_viewer.viewer.views.heatmap import HeatmapView
from transformer_viewer.viewer.views.token_axis import short_label

MAX_TEXT_CELLS = 600  # beyond this many cells, values and tokens are only in the hover readout
TEXT_CHARS = 7
MIN_TEXT_CELL_PX = 40  # cell texts show only while a cell is at least this wide on screen

DIFF_TIP = ("Show the run under the head mask and feature clamps minus the clean run, on a diverging "
            "scale centred at zero (mask a head or clamp a feature first; without either the difference "
            "is exactly zero)")
CLEAN_PEN = pg.mkPen((150, 150, 150), width=1.5, style=QtCore.Qt.PenStyle.DashLine)
MAIN_PEN = pg.mkPen((30, 100, 200), width=2)
SELECT_PEN = pg.mkPen((220, 60, 60), width=1.5, style=QtCore.Qt.PenStyle.DotLine)


def run_name(intervention) -> str:
    """What the views call the run under `intervention`, in titles and legends: "masked" (heads
    only), "clamped" (feature clamps only), "intervened" (both, or activation patches)."""
    if intervention.patches or (intervention.n_masked and intervention.clamps):
        return "intervened"
    return "clamped" if intervention.clamps else "masked"


class DiffToggle(QtWidgets.QCheckBox):
    """"Diff" checkbox; usable while the runs change anything (a masked head, a feature clamp):
    the run under the intervention minus the clean run. `active` says if a diff is shown."""

    def __init__(self, state, parent=None):
        super().__init__("Diff vs clean", parent)
        self.state = state
        self.setToolTip(DIFF_TIP)
        state.mask_changed.connect(lambda _m: self._update_enabled())  # a head toggle or a clamp
        state.trace_changed.connect(lambda _t: self._update_enabled())
        self._update_enabled()

    def _update_enabled(self) -> None:
        self.setEnabled(not self.state.intervention.is_empty)

    @property
    def active(self) -> bool:
        """Checked, and there is a trace under an intervention and its clean baseline to
        subtract. Without one the view shows the model itself (the difference would be exactly
        zero)."""
        st = self.state
        return (self.isChecked() and st.trace is not None and st.clean_trace is not None
                and st.trace is not st.clean_trace and not st.trace.intervention.is_empty
                and st.trace.n_tokens == st.clean_trace.n_tokens)


class AdaptiveSplitter(QtWidgets.QSplitter):
    """A splitter that lays its parts side by side when it is wide and stacks them when it is
    not (a tab in the middle of the window is narrow, a floating dock may be wide). `inner`, a
    splitter among the parts, gets the other orientation, so a side panel keeps its shape."""

    def __init__(self, ratio: float = 1.6, inner: QtWidgets.QSplitter | None = None, parent=None):
        super().__init__(QtCore.Qt.Orientation.Horizontal, parent)
        self.ratio, self.inner = ratio, inner
        self.setChildrenCollapsible(False)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt name
        size = event.size()
        wide = size.width() >= self.ratio * size.height()
        want = QtCore.Qt.Orientation.Horizontal if wide else QtCore.Qt.Orientation.Vertical
        if want != self.orientation():
            self.setOrientation(want)
            if self.inner is not None:
                self.inner.setOrientation(QtCore.Qt.Orientation.Vertical if wide else QtCore.Qt.Orientation.Horizontal)
        super().resizeEvent(event)


def view_bar(info: QtWidgets.QLabel, export_button: QtWidgets.QWidget, *controls) -> QtWidgets.QHBoxLayout:
    """The row above a view: its controls, its info line taking the spare width, its export button."""
    bar = QtWidgets.QHBoxLayout()
    bar.setContentsMargins(4, 2, 4, 0)
    for widget in controls:
        bar.addWidget(widget)
    bar.addWidget(info, 1)
    bar.addWidget(export_button)
    return bar


def bar_over(view: QtWidgets.QWidget, bar: QtWidgets.QLayout, body: QtWidgets.QWidget) -> None:
    """Lay out `view` as its control row above its body, the body taking the spare height."""
    layout = QtWidgets.QVBoxLayout(view)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(2)
    layout.addLayout(bar)
    layout.addWidget(body, 1)


class ExportButton(QtWidgets.QToolButton):
    """"Export ▾": PNG, SVG, PDF, .npy, .csv of `view` (which has the export protocol). In the
    window `exporter(ext)` is the window's export (its options dialog, manifest and list of
    exports); a view on its own exports through `export`, without a manifest."""

    exported = QtCore.Signal(str)
    failed = QtCore.Signal(str)

    def __init__(self, view, name: str, parent=None):
        super().__init__(parent)
        self.view, self.name = view, name
        self.setText("Export")
        self.setToolTip("Save this view as PNG, SVG or PDF, or its matrix as .npy or .csv")
        self.setPopupMode(QtWidgets.QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QtWidgets.QMenu(self)
        for ext, text in ((".png", "PNG image…"), (".svg", "SVG image…"), (".pdf", "PDF document…"), (".npy", "Matrix as .npy…"),
                          (".csv", "Matrix as .csv…")):
            menu.addAction(text, lambda e=ext: self.dialog(e))
        self.setMenu(menu)
        self.folder = os.getcwd()
        self.exporter = None  # set by the window: exporter(ext) asks and writes as File > Export does

    def dialog(self, ext: str) -> None:
        if self.exporter is not None:
            self.exporter(ext)
            return
        from transformer_viewer.viewer.views.export_options import FigureOptions, ask_figure_options

        options = FigureOptions()
        if ext in (".png", ".svg", ".pdf"):
            target = self.view.export_target() if hasattr(self.view, "export_target") else self.view
            options = ask_figure_options(self, ext, (target.width(), target.height()))
            if options is None:
                return
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export", os.path.join(self.folder, self.name + ext))
        if path:
            self.export(path, scale=options.scale, theme=options.theme)

    def export(self, path: str, scale: float = 2.0, theme: str = "light") -> str | None:
        """Write `path` (by its extension), an image as a figure in `theme` titled with the model,
        the view and the mask; a failure is one line in a message box."""
        from transformer_viewer.model.errors import ModelError
        from transformer_viewer.viewer.export import export_view
        from transformer_viewer.viewer.figure import FigureStyle, view_title
        from transformer_viewer.viewer.views.registry import title_of

        try:
            if self.view.matrix().size == 0:
                raise ModelError("nothing to export yet: run a prompt first")
            state = getattr(self.view, "state", None)
            notes = tuple(self.view.figure_notes()) if hasattr(self.view, "figure_notes") else ()
            style = FigureStyle(theme=theme, title=view_title(state, title_of(self.view), self.view)
                                if state is not None else "", notes=notes)
            written = export_view(self.view, path, scale=scale if path.lower().endswith(".png") else 1.0,
                                  style=style)
        except (ModelError, OSError) as e:
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            self.failed.emit(message)
            if not os.environ.get("TRANSFORMER_VIEWER_NO_DIALOGS"):
                QtWidgets.QMessageBox.warning(self, "Export", message)
            return None
        self.folder = os.path.dirname(written)
        self.exported.emit(written)
        return written


class TextHeatmap(HeatmapView):
    """A HeatmapView that can write a short text in each cell (small matrices only) and name
    it in the hover readout: the lens's top tokens, the scan's values."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.cell_texts: list[list[str]] = []
        self.hover_prefix = "top token"
        self._cell_items: list[pg.TextItem] = []
        self.view.sigRangeChanged.connect(lambda *_: self._update_text_visibility())
        self.view.sigResized.connect(lambda *_: self._update_text_visibility())

    def _update_text_visibility(self) -> None:
        """Texts only while they fit: zooming in on a long prompt brings them back."""
        if not self._cell_items:
            return
        (x0, x1), _ = self.view.viewRange()
        cell_px = self.view.width() / max(x1 - x0, 1e-9)
        show = cell_px >= MIN_TEXT_CELL_PX
        for t in self._cell_items:
            t.setVisible(show)

    def texts_visible(self) -> bool:
        return bool(self._cell_items) and self._cell_items[0].isVisible()

    def legible_width(self) -> int:
        """The widget width at which the columns in view are MIN_TEXT_CELL_PX wide, so that
        their texts show (what is not the plot area, axes and colour bar, keeps its width)."""
        (x0, x1), _ = self.view.viewRange()
        return int(self.width() - self.view.width() + (x1 - x0) * MIN_TEXT_CELL_PX) + 1

    def hover_text(self, row: int, col: int) -> str:
        base = super().hover_text(row, col)
        if base and self.hover_prefix and row < len(self.cell_texts) and col < len(self.cell_texts[row]):
            return f"{base}   {self.hover_prefix} {self.cell_texts[row][col]!r}"
        return base

    def set_cell_text(self, texts: list[list[str]], dark_text: np.ndarray | None = None) -> None:
        """Write `texts` (R x C) into the cells; `dark_text` (R, C) bool picks black over white."""
        for t in self._cell_items:
            self.plot.removeItem(t)
        self._cell_items = []
        self.cell_texts = texts
        R = len(texts)
        C = len(texts[0]) if R else 0
        if R * C == 0 or R * C > MAX_TEXT_CELLS:
            return
        font = QtGui.QFont()
        font.setPointSizeF(7.0)
        for r in range(R):
            for c in range(C):
                dark = dark_text is None or bool(dark_text[r, c])
                t = pg.TextItem(short_label(texts[r][c], TEXT_CHARS), color=(0, 0, 0) if dark else (255, 255, 255),
                                anchor=(0.5, 0.5))
                t.setFont(font)
                t.setPos(c + 0.5, r + 0.5)
                self.plot.addItem(t, ignoreBounds=True)
                self._cell_items.append(t)
        self._update_text_visibility()

    def text_items(self) -> list[pg.TextItem]:
        return self._cell_items


def depth_plot(title: str = "", left: str = "", bottom: str = "") -> pg.PlotWidget:
    """A small line plot whose x axis names residual-stream positions through depth."""
    w = pg.PlotWidget()
    w.depth_labels = None
    # Re-thin the depth labels when the plot changes size (a signal: no Qt virtual overridden).
    w.getPlotItem().getViewBox().sigResized.connect(
        lambda *_: set_depth_ticks(w, w.depth_labels) if w.depth_labels else None)
    w.setBackground("w")
    item = w.getPlotItem()
    item.showGrid(x=True, y=True, alpha=0.25)
    item.setMenuEnabled(False)
    item.hideButtons()
    if title:
        item.setTitle(title, size="9pt")
    for side, text in (("left", left), ("bottom", bottom)):
        axis = item.getAxis(side)
        axis.setPen("k")
        axis.setTextPen("k")
        if text:
            item.setLabel(side, text)
    w.setMinimumSize(160, 120)
    shrinkable_title(item)
    return w


def set_depth_ticks(plot: pg.PlotWidget, labels) -> None:
    """Name the x positions 0..n-1 (every step-th, as many as fit) and show exactly that range."""
    labels = list(labels)
    plot.depth_labels = labels
    plot.getPlotItem().setXRange(-0.6, len(labels) - 0.4, padding=0)  # room for the end labels
    fit = max(2, int(max(plot.width() - 70, 60) // 42))  # about 42 px per label like "11.mid"
    step = max(1, -(-len(labels) // fit))
    plot.getPlotItem().getAxis("bottom").setTicks([[(i, labels[i]) for i in range(0, len(labels), step)],
                                                  [(i, "") for i in range(len(labels))]])


def compact_axes(heatmap) -> None:
    """Hide a heatmap's axis names (the hover readout still says them) and let its title be
    cut rather than widen the plot past its widget: small panels need the room."""
    for side in ("left", "bottom"):
        heatmap.plot.getAxis(side).showLabel(False)
    shrinkable_title(heatmap.plot)


def shrinkable_title(plot_item) -> None:
    """pyqtgraph makes a title's text width the plot's minimum width (again on every resize), so
    a long title in a narrow panel pushes the plot and its colour bar out of view. This title
    keeps its height but lets the plot be narrower than its text (the text is then cut)."""
    label = plot_item.titleLabel
    if getattr(label, "_shrinkable", False):
        return
    full = label.updateMin

    def update_min():
        full()
        label.setMinimumWidth(0)
        hints = label._sizeHint
        for which in (QtCore.Qt.SizeHint.MinimumSize, QtCore.Qt.SizeHint.PreferredSize):
            hints[which] = (0, hints[which][1])
        label.updateGeometry()
    label.updateMin = update_min
    label._shrinkable = True
    update_min()


def compact_table(table: QtWidgets.QTableWidget) -> None:
    """Read-only, row-selecting, with rows one line high."""
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 6)
    table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
    table.horizontalHeader().setStretchLastSection(True)


def head_labels(n: int) -> tuple[str, ...]:
    return tuple(f"H{h}" for h in range(n))


def layer_labels(n: int) -> tuple[str, ...]:
    return tuple(f"L{layer}" for layer in range(n))
