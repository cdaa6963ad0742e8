"""A figure depends on what its view shows now, not on what it drew before: its axes are
measured afresh from their ticks, and a line plot's markers are shapes in an SVG, not pieces of
the bitmap of every marker the plot has drawn."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from tests.helpers.figures import png_pixels
from transformer_viewer.viewer.export import export_png, export_svg
from transformer_viewer.viewer.views.parts import depth_plot


def _plot(qtbot, *histories):
    """A depth plot that has drawn each of `histories` in turn (as markers on a line)."""
    plot = depth_plot("effect", left="direct effect (x0.001)")
    qtbot.addWidget(plot)
    plot.resize(420, 260)
    plot.show()
    qtbot.waitExposed(plot)
    for values in histories:
        plot.clear()
        plot.plot(np.arange(len(values)), values, symbol="o", symbolSize=6)
        plot.getPlotItem().enableAutoRange()
        qtbot.wait(20)  # drawn: the axis takes the room of this history's tick texts
    return plot


def test_a_figure_does_not_remember_the_wide_ticks_its_plot_showed_before(qtbot, tmp_path):
    now = np.array([1.0, 3.0, 2.0, 4.0], dtype=np.float32)
    seasoned = _plot(qtbot, now * 0.01, now * -50.0, now)  # ticks wider by less than the 10 px an axis frees
    fresh = _plot(qtbot, now)
    a = export_png(seasoned, str(tmp_path / "a.png"), size=(420, 260))
    b = export_png(fresh, str(tmp_path / "b.png"), size=(420, 260))
    assert np.array_equal(png_pixels(a), png_pixels(b))


def test_svg_markers_are_shapes_whatever_markers_the_plot_drew_before(qtbot, tmp_path):
    plot = _plot(qtbot, np.array([1.0, 2.0, 3.0], dtype=np.float32))
    plot.plot([0, 1], [2, 1], symbol="s", symbolSize=9, symbolBrush="r")  # another marker in the atlas
    lines = [i for i in plot.getPlotItem().items if isinstance(i, pg.PlotDataItem)]
    assert len(lines) == 2
    svg = open(export_svg(plot, str(tmp_path / "m.svg")), "rb").read()
    assert b"<image" not in svg
