"""An export target laid out at the size it is exported at, and drawn: a view holding plots as a
figure (viewer/figure.py), any other widget as it is on screen. Qt is imported inside the
functions, so importing this costs nothing on the command line."""

from __future__ import annotations

import contextlib

from transformer_viewer.viewer.export_files import ExportError


def graphics_view_of(target):
    """(the QGraphicsView to render, None) or (None, the widget to render) for an export target."""
    from PySide6 import QtWidgets

    if hasattr(target, "export_target"):
        target = target.export_target()
    if isinstance(target, QtWidgets.QGraphicsView):
        return target, None
    if isinstance(target, QtWidgets.QWidget):
        return None, target
    raise ExportError(f"cannot render a {type(target).__name__} as an image; pass a view widget")


def _flush_layout(widget) -> None:
    from PySide6 import QtWidgets

    app = QtWidgets.QApplication.instance()
    if app is not None:
        app.processEvents()
    widget.updateGeometry()


@contextlib.contextmanager
def _sized(view, widget, size):
    """Temporarily give the rendered widget `size` (w, h) so the layout is done at that size."""
    w = view if view is not None else widget
    if size is None:
        yield w.width(), w.height()
        return
    old = w.size()
    try:
        w.resize(int(size[0]), int(size[1]))
        _flush_layout(w)
        yield int(size[0]), int(size[1])
    finally:
        w.resize(old)
        _flush_layout(w)


def _render(view, widget, painter, width: int, height: int) -> None:
    from PySide6 import QtCore

    target = QtCore.QRectF(0, 0, width, height)
    if view is not None:
        painter.fillRect(target, view.backgroundBrush())
        source = view.mapToScene(view.viewport().rect()).boundingRect()
        view.scene().render(painter, target, source)
    else:
        painter.scale(width / max(1, widget.width()), height / max(1, widget.height()))
        widget.render(painter, QtCore.QPoint())  # PySide6 has no render(painter) overload


@contextlib.contextmanager
def laid_out(target, size=None, style=None):
    """Inside the block, `target` laid out for export at `size` (w, h) logical pixels; yields
    (width, height, paint) where paint(painter) draws it. A target holding plots is drawn as a
    figure (viewer/figure.py: the plots alone, in `style`'s theme, under its title); a plain
    widget as it is on screen."""
    from transformer_viewer.viewer.figure import figure, graphics_views

    view, widget = graphics_view_of(target)
    shown = view if view is not None else widget
    if not graphics_views(shown):
        with _sized(view, widget, size) as (w, h):
            yield w, h, lambda painter: _render(view, widget, painter, w, h)
        return
    try:
        context = figure(shown, size, style)
        fig = context.__enter__()
    except ValueError as e:
        raise ExportError(str(e)) from None
    try:
        yield fig.width, fig.height, fig.paint
    finally:
        context.__exit__(None, None, None)


def layout_size(target, style=None) -> tuple[int, int]:
    """(w, h) logical pixels of the figure `target` makes at its on-screen size in `style`: the
    size that, given to `laid_out`, lays it out exactly as it is laid out now."""
    with laid_out(target, None, style) as (w, h, _paint):
        return w, h
