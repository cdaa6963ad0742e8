"""The figure an exported image is: a view's plots restyled for a page, under a title band.

A view on screen is a set of pyqtgraph plots among widgets (buttons, combo boxes, hover
readouts) in the window's dark theme. A figure keeps only the plots: while it is rendered the
widgets around them are hidden (the plots take their room), the plots are given the theme's
background and text colours (the colormaps are data and stay as they are), the axis names a
small panel hides on screen are shown, and a plot title too long for its panel is set smaller
until it fits. Above the plots a band holds the figure's title (the model, the view, what is
masked), wrapped to the figure's width so that no word of it is cut; below them a band holds
notes such as what the "·" of a token label means. Afterwards everything is as it was.

`figure(target, size, style)` does the above and yields a `Figure` that paints itself onto
any QPainter device: the PNG, SVG and PDF writers in viewer/export.py and
viewer/vector_export.py all draw through it. Sizes are logical pixels of 1/96 inch; a PNG is
drawn at `dpi / 96` device pixels per logical pixel.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field

CSS_DPI = 96  # logical pixels per inch: Qt's SVG and PDF writers here, and CSS
SPACE_MARKER = "\u00b7"
SPACE_MARKER_NOTE = f'"{SPACE_MARKER}" in a token label marks the space the token starts with'
TITLE_PX = 15  # the figure title's font size in logical pixels
NOTE_PX = 11
MARGIN = 6  # logical pixels around the title and the notes
MIN_PLOT_TITLE_PT = 6.0  # a panel title is set down to this size to fit its panel, then wrapped


@dataclass(frozen=True)
class Theme:
    """Colours of a figure other than its data's: the page, and text, axes and frames."""

    name: str
    background: str
    foreground: str


THEMES = {
    "light": Theme("light", "#ffffff", "#1a1a1a"),
    "dark": Theme("dark", "#000000", "#d2d2d2"),
}


@dataclass(frozen=True)
class FigureStyle:
    """How an exported figure looks: its theme ("light" for a page, "dark" as on screen), its
    title line and extra note lines under the plots."""

    theme: str = "light"
    title: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    manifest: str = ""  # a figure manifest's JSON to embed in an SVG's or PDF's metadata ("": none)

    def __post_init__(self) -> None:
        if self.theme not in THEMES:
            raise ValueError(f"unknown theme {self.theme!r}; use one of {', '.join(THEMES)}")

    @property
    def colours(self) -> Theme:
        return THEMES[self.theme]


def parse_length(text: str) -> float:
    """A physical length in inches: "3.5in", "8cm", "80mm" (a bare number is inches)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(in|cm|mm)?\s*", str(text).lower())
    if match is None:
        raise ValueError(f"width {text!r}: write a length such as 3.5in, 8cm or 80mm")
    value = float(match[1])
    return value / {"in": 1.0, None: 1.0, "cm": 2.54, "mm": 25.4}[match[2]]


def graphics_views(target) -> list:
    """The graphics views a figure of `target` draws, outermost only, in the widget tree's order."""
    from PySide6 import QtWidgets

    if isinstance(target, QtWidgets.QGraphicsView):
        return [target]
    found = [v for v in target.findChildren(QtWidgets.QGraphicsView)
             if v.scene() is not None and v.isVisibleTo(target)]
    return [v for v in found if not any(o is not v and o.isAncestorOf(v) for o in found)]


def _leaf_widgets(target, views) -> list:
    """The widgets around the plots (controls, readouts) that a figure leaves out."""
    from PySide6 import QtWidgets

    if isinstance(target, QtWidgets.QGraphicsView):
        return []
    kinds = (QtWidgets.QAbstractButton, QtWidgets.QLabel, QtWidgets.QComboBox, QtWidgets.QAbstractSpinBox,
             QtWidgets.QLineEdit, QtWidgets.QSlider, QtWidgets.QProgressBar, QtWidgets.QAbstractItemView)
    return [w for w in target.findChildren(QtWidgets.QWidget)
            if isinstance(w, kinds) and w.isVisibleTo(target) and not any(v.isAncestorOf(w) for v in views)]


def token_labels_shown(views) -> list[str]:
    """Every token label on the figure's token axes."""
    from transformer_viewer.viewer.views.token_axis import TokenAxis

    labels: list[str] = []
    for view in views:
        for item in view.scene().items():
            if isinstance(item, TokenAxis) and item.isVisible():
                labels.extend(item.labels())
    return labels


def _title_font(px: int, bold: bool):
    from PySide6 import QtGui

    font = QtGui.QFont()  # the default sans-serif face: the SVG names it generically
    font.setStyleHint(QtGui.QFont.StyleHint.SansSerif)
    font.setPixelSize(px)
    font.setBold(bold)
    return font


def _band_height(text: str, width: int, font) -> int:
    """Logical pixels a word-wrapped `text` needs at `width`, margins included (0 for none)."""
    from PySide6 import QtCore, QtGui

    if not text:
        return 0
    rect = QtGui.QFontMetricsF(font).boundingRect(
        QtCore.QRectF(0, 0, max(1, width - 2 * MARGIN), 1e6),
        int(QtCore.Qt.AlignmentFlag.AlignHCenter | QtCore.Qt.TextFlag.TextWordWrap), text)
    return int(rect.height() + 0.999) + 2 * MARGIN


class _Restyled:
    """The theme put on the plots of some graphics views, and taken off again by `restore`."""

    def __init__(self, views, theme: Theme):
        import pyqtgraph as pg
        from PySide6 import QtGui, QtWidgets

        self._undo: list = []
        fg = QtGui.QColor(theme.foreground)
        for view in views:
            if isinstance(view, pg.GraphicsView):
                old = view._background
                view.setBackground(theme.background)
                self._undo.append(lambda v=view, o=old: v.setBackground(o))
            else:
                brush = view.backgroundBrush()
                view.setBackgroundBrush(QtGui.QBrush(QtGui.QColor(theme.background)))
                self._undo.append(lambda v=view, b=brush: v.setBackgroundBrush(b))
            for item in view.scene().items():
                if isinstance(item, pg.AxisItem):
                    self._axis(item, fg)
                elif isinstance(item, pg.LabelItem):
                    saved = (item.text, dict(item.opts))
                    item.setText(item.text, color=theme.foreground)
                    self._undo.append(lambda i=item, s=saved: self._label_back(i, s))
                elif isinstance(item, (pg.PlotCurveItem, pg.InfiniteLine, QtWidgets.QAbstractGraphicsShapeItem)):
                    self._line(item, theme)

    def _axis(self, axis, fg) -> None:
        saved = (axis._pen, axis._textPen, dict(axis.labelStyle), axis.label.isVisible())
        axis.setPen(fg)
        axis.setTextPen(fg)
        if axis.labelText and not axis.label.isVisible():
            axis.showLabel(True)  # on screen a small panel hides its axis names; a figure says them

        def back(a=axis, s=saved):
            a._pen, a._textPen, a.labelStyle = s[0], s[1], s[2]
            a._updateLabel()
            a.showLabel(s[3])
            a.picture = None
            a.update()
        self._undo.append(back)

    @staticmethod
    def _label_back(label, saved) -> None:
        label.opts = saved[1]
        label.setText(saved[0])

    def _line(self, item, theme: Theme) -> None:
        """A line drawn in the other theme's text colour (black on a white plot, the grid's white
        frame) would vanish on this theme's background: it takes this theme's text colour."""
        from PySide6 import QtCore, QtGui, QtWidgets

        if isinstance(item, QtWidgets.QAbstractGraphicsShapeItem):  # a frame, an outline
            pen = QtGui.QPen(item.pen()) if item.pen().style() != QtCore.Qt.PenStyle.NoPen else None
        else:
            pen = QtGui.QPen(item.pen) if isinstance(getattr(item, "pen", None), QtGui.QPen) else None
        if pen is None and hasattr(item, "opts"):
            pen = QtGui.QPen(item.opts.get("pen")) if isinstance(item.opts.get("pen"), QtGui.QPen) else None
        if pen is None:
            return
        lightness = pen.color().lightness()
        if (theme.name == "dark" and lightness < 60) or (theme.name == "light" and lightness > 200):
            new = QtGui.QPen(pen)
            new.setColor(QtGui.QColor(theme.foreground))
            item.setPen(new)
            self._undo.append(lambda i=item, p=pen: i.setPen(p))

    def fit_titles(self, views) -> None:
        """Every plot title no wider than its panel: set smaller, down to MIN_PLOT_TITLE_PT, and
        past that wrapped onto as many lines as it needs (its row of the plot grown to hold
        them). Repeated until the layout stops moving, as a taller title narrows nothing but a
        smaller one may let the axes move."""
        import pyqtgraph as pg

        saved_labels: set[int] = set()
        for _round in range(3):
            moved = False
            for view in views:
                for item in view.scene().items():
                    if isinstance(item, pg.PlotItem) and item.titleLabel.isVisible() and item.titleLabel.text:
                        moved |= self._fit_title(item, saved_labels)
            if not moved:
                return
            _flush()

    def _fit_title(self, plot, saved_labels: set[int]) -> bool:
        label = plot.titleLabel
        room = label.geometry().width() - 4  # the title's column: over the plot, beside its axis
        if label.item.boundingRect().width() <= room:
            return False
        if id(label) not in saved_labels:
            saved_labels.add(id(label))
            row = plot.layout.rowMinimumHeight(0), label.maximumHeight()
            self._undo.append(lambda i=label, s=(label.text, dict(label.opts)), p=plot, r=row: self._unwrap(i, s, p, r))
        size = _points(label.opts.get("size")) or 9.0
        while label.item.boundingRect().width() > room and size > MIN_PLOT_TITLE_PT:
            size = max(MIN_PLOT_TITLE_PT, size - 0.5)
            label.setText(label.text, size=f"{size:g}pt")
        if label.item.boundingRect().width() > room:  # too long even so: on as many lines as it needs
            label.item.setTextWidth(max(1.0, room))
            height = label.item.boundingRect().height() + 2
            label.setMaximumHeight(height)
            plot.layout.setRowFixedHeight(0, height)
        return True

    @classmethod
    def _unwrap(cls, label, saved, plot, row) -> None:
        label.item.setTextWidth(-1)
        plot.layout.setRowFixedHeight(0, row[0])
        label.setMaximumHeight(row[1])
        cls._label_back(label, saved)

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def _points(size) -> float | None:
    match = re.fullmatch(r"\s*([\d.]+)\s*pt\s*", str(size or ""))
    return float(match[1]) if match else None


class Figure:
    """A laid-out figure: `width` x `height` logical pixels; `paint(painter)` draws it."""

    def __init__(self, target, views, style: FigureStyle, width: int, title_h: int, plots_h: int, notes: str,
                 notes_h: int):
        self.target, self.views, self.style = target, views, style
        self.width, self.title_h, self.plots_h, self.notes, self.notes_h = width, title_h, plots_h, notes, notes_h
        self.height = title_h + plots_h + notes_h

    def plot_rect(self, view):
        """Where `view`'s picture sits in the figure, in logical pixels."""
        from PySide6 import QtCore, QtWidgets

        if isinstance(self.target, QtWidgets.QGraphicsView):
            offset = QtCore.QPoint(0, 0)
        else:
            offset = view.mapTo(self.target, QtCore.QPoint(0, 0))
        return QtCore.QRectF(offset.x(), self.title_h + offset.y(), view.width(), view.height())

    def paint(self, painter) -> None:
        from PySide6 import QtCore, QtGui

        colours = self.style.colours
        painter.fillRect(QtCore.QRectF(0, 0, self.width, self.height), QtGui.QColor(colours.background))
        painter.setPen(QtGui.QColor(colours.foreground))
        if self.title_h:
            painter.setFont(_title_font(TITLE_PX, True))
            painter.drawText(QtCore.QRectF(MARGIN, MARGIN, self.width - 2 * MARGIN, self.title_h - 2 * MARGIN),
                             int(QtCore.Qt.AlignmentFlag.AlignHCenter | QtCore.Qt.TextFlag.TextWordWrap),
                             self.style.title)
        for view in self.views:
            source = view.mapToScene(view.viewport().rect()).boundingRect()
            view.scene().render(painter, self.plot_rect(view), source)
        if self.notes_h:
            painter.setPen(QtGui.QColor(colours.foreground))
            painter.setFont(_title_font(NOTE_PX, False))
            top = self.title_h + self.plots_h
            painter.drawText(QtCore.QRectF(MARGIN, top + MARGIN, self.width - 2 * MARGIN, self.notes_h - 2 * MARGIN),
                             int(QtCore.Qt.AlignmentFlag.AlignLeft | QtCore.Qt.TextFlag.TextWordWrap), self.notes)


def _flush() -> None:
    from PySide6 import QtWidgets

    app = QtWidgets.QApplication.instance()
    if app is not None:
        app.processEvents()


def _settle_axes(views) -> None:
    """Measure every axis afresh from the ticks it shows at the figure's size. An axis keeps the
    room of the widest tick text it has shown (it gives room back only once 10 pixels would be
    freed), so on screen its width depends on what the view drew before; measured afresh, a
    figure is the same whatever its view went through: the window's, and the export command's
    drawn once."""
    import pyqtgraph as pg
    from PySide6 import QtCore, QtGui

    axes = [item for view in views for item in view.scene().items()
            if isinstance(item, pg.AxisItem) and item.isVisible()]
    if not axes:
        return
    for axis in axes:
        axis.textWidth, axis.textHeight = 0, 0
        axis.picture = None
    for _round in range(2):  # the new widths move the other axes' ticks: once more with those
        for view in views:
            scratch = QtGui.QImage(max(1, view.width()), max(1, view.height()), QtGui.QImage.Format.Format_ARGB32)
            painter = QtGui.QPainter(scratch)
            try:
                view.scene().render(painter, QtCore.QRectF(scratch.rect()), view.mapToScene(view.viewport().rect()).boundingRect())
            finally:
                painter.end()
        _flush()


@contextlib.contextmanager
def figure(target, size: tuple[int, int] | None = None, style: FigureStyle | None = None):
    """Inside the block `target` (a QGraphicsView, or a widget holding some) is laid out and
    styled as a figure of `size` (w, h) logical pixels in all (default: its on-screen size plus
    the title and note bands); yields the `Figure`."""
    import pyqtgraph as pg

    style = style or FigureStyle()
    views = graphics_views(target)
    if not views:
        raise ValueError(f"a {type(target).__name__} holds no plot to draw")
    hidden = _leaf_widgets(target, views)
    top = target.window()
    old_size, old_top = target.size(), top.size()
    restyled = None
    extras = contextlib.ExitStack()
    try:
        for view in views:  # what a view draws only in figures (the heads grid's colour bar)
            if callable(getattr(view, "figure_extras", None)):
                extras.enter_context(view.figure_extras())
        for widget in hidden:
            widget.hide()
        _flush()  # the plots take the widgets' room
        width = int(size[0]) if size is not None else target.width()
        labels = token_labels_shown(views)
        notes = [*style.notes]
        if any(SPACE_MARKER in label for label in labels) and SPACE_MARKER_NOTE not in notes:
            notes.append(SPACE_MARKER_NOTE)
        notes_text = "; ".join(notes)
        title_h = _band_height(style.title, width, _title_font(TITLE_PX, True))
        notes_h = _band_height(notes_text, width, _title_font(NOTE_PX, False))
        plots_h = int(size[1]) - title_h - notes_h if size is not None else target.height()
        if plots_h < 16:
            raise ValueError(f"a figure {width} x {size[1] if size else plots_h} logical pixels leaves no room for "
                             "the plots under its title; make it taller")
        # Cell texts (the lens's tokens, the scan's values) shown on screen stay shown: the axis
        # names a figure adds take a few pixels from the cells, which would hide them.
        texts = [item for view in views for item in view.scene().items()
                 if isinstance(item, pg.TextItem) and item.isVisible()]
        restyled = _Restyled(views, style.colours)
        if (target.width(), target.height()) != (width, plots_h):
            # The window's layout places the target: grow or shrink the window by the difference.
            if top is not target:
                top.resize(top.width() + width - target.width(), top.height() + plots_h - target.height())
                _flush()
            if (target.width(), target.height()) != (width, plots_h):  # a layout that would not follow
                target.resize(width, plots_h)
                _flush()
        _settle_axes(views)
        restyled.fit_titles(views)
        _flush()
        for item in texts:
            item.setVisible(True)
        yield Figure(target, views, style, width, title_h, plots_h, notes_text, notes_h)
    finally:
        if restyled is not None:
            restyled.restore()
        extras.close()
        for widget in hidden:
            widget.show()
        if top is not target:
            top.resize(old_top)
        target.resize(old_size)
        _flush()


def mask_text(mask, ablation: str = "zero") -> str:
    """What is masked, as a figure title says it: "heads 1.0, 3.* masked (zero ablation)"."""
    import numpy as np

    if mask is None or not np.asarray(mask).any():
        return "nothing masked"
    m = np.asarray(mask, dtype=bool)
    names = []
    for layer, row in enumerate(m):
        if row.all():
            names.append(f"{layer}.*")
        else:
            names.extend(f"{layer}.{head}" for head in np.flatnonzero(row).tolist())
    word = "head" if len(names) == 1 and not names[0].endswith("*") else "heads"
    return f"{word} {', '.join(names)} masked ({ablation} ablation)"


def figure_title(model: str, view: str, mask=None, ablation: str = "zero") -> str:
    """A figure's title line: the model, the view (with what it shows) and what is masked."""
    return " \u2014 ".join(part for part in (model, view, mask_text(mask, ablation)) if part)


def view_title(state, name: str, view=None) -> str:
    """The title of a figure of `view` (the registry's `name` for it) drawn from `state`: the
    model's name, the view with what it shows (its own title(), when it has one: "layer 2 head
    2"), the mask, and any SAE feature clamps."""
    own = view.title() if view is not None and callable(getattr(view, "title", None)) else ""
    info = getattr(state, "model_info", None)
    shown = f"{name}: {own}" if own and own != name else name
    title = figure_title(info.name if info is not None else "", shown, getattr(state, "mask", None),
                         getattr(state, "ablation", "zero"))
    clamps = getattr(state, "clamps", ())
    if clamps:  # SAE features clamped too: "... — clamps 0:12=5, 0:7x0.5"
        title += " \u2014 clamp" + ("s " if len(clamps) != 1 else " ") + ", ".join(c.describe() for c in clamps)
    return title
