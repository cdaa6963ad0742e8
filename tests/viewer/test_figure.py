"""The figure an export draws: lengths in physical units, the title line, panel titles that fit,
the widgets left out, the theme put on and taken off again."""

import numpy as np
import pytest
from PySide6 import QtWidgets

from transformer_viewer.viewer.figure import (
    SPACE_MARKER_NOTE,
    FigureStyle,
    figure,
    figure_title,
    mask_text,
    parse_length,
)
from transformer_viewer.viewer.views.heatmap import HeatmapView
from transformer_viewer.viewer.views.parts import compact_axes


@pytest.mark.parametrize("text, inches", [("3.5in", 3.5), ("8cm", 8 / 2.54), ("80mm", 80 / 25.4), ("2", 2.0),
                                          (" 7.25 IN ", 7.25)])
def test_lengths(text, inches):
    assert parse_length(text) == pytest.approx(inches)


@pytest.mark.parametrize("text", ["", "3.5pt", "cm", "-2in", "3.5 inches"])
def test_bad_lengths(text):
    with pytest.raises(ValueError, match="3.5in, 8cm or 80mm"):
        parse_length(text)


def test_the_title_says_the_model_the_view_and_the_mask():
    mask = np.zeros((3, 4), dtype=bool)
    assert mask_text(mask) == "nothing masked"
    mask[0, 1] = True
    assert mask_text(mask, "mean") == "head 0.1 masked (mean ablation)"
    mask[2] = True
    assert figure_title("gpt2", "Attention: layer 1 head 0", mask) == \
        "gpt2 \u2014 Attention: layer 1 head 0 \u2014 heads 0.1, 2.* masked (zero ablation)"


def test_an_unknown_theme_is_refused():
    with pytest.raises(ValueError, match="light, dark"):
        FigureStyle(theme="sepia")


@pytest.fixture
def panel(qtbot):
    """A heatmap in a narrow panel, axis names hidden and its title cut on screen, as the
    residual view lays out its small panels."""
    view = HeatmapView()
    qtbot.addWidget(view)
    view.resize(260, 300)
    view.show()
    qtbot.waitExposed(view)
    labels = ("The", "\u00b7cat", "\u00b7sat")
    view.set_data(np.eye(3, dtype=np.float32), labels, labels,
                  title="masked \u2212 clean norm through depth, '\u00b7good' (2) of a long prompt")
    compact_axes(view)
    return view


def test_a_figure_fits_its_titles_says_its_axes_and_leaves_out_the_widgets(panel):
    title = panel.plot.titleLabel
    assert title.item.boundingRect().width() > title.geometry().width()  # cut on screen
    button = panel.reset_button
    with figure(panel, style=FigureStyle(title="a model \u2014 a view \u2014 nothing masked")) as fig:
        whole = title.item.boundingRect()
        assert whole.width() <= title.geometry().width() and whole.height() <= title.geometry().height() + 1  # whole
        assert panel.plot.getAxis("left").label.isVisible() and panel.plot.getAxis("bottom").label.isVisible()
        assert not button.isVisible() and not panel.hover_label.isVisible()
        assert fig.notes == SPACE_MARKER_NOTE and fig.title_h > 0
        assert panel.graphics.backgroundBrush().color().name() == "#ffffff"
        assert panel.plot.getAxis("left").textPen().color().name() == "#1a1a1a"
    # everything as it was on screen
    assert button.isVisible() and not panel.plot.getAxis("left").label.isVisible()
    assert title.item.boundingRect().width() > title.geometry().width()
    assert panel.graphics.backgroundBrush().color().name() == "#000000"
    assert panel.size().width() == 260


def test_a_figure_of_a_given_size_is_that_size(panel):
    with figure(panel, size=(400, 300), style=FigureStyle(title="t")) as fig:
        assert (fig.width, fig.height) == (400, 300)
        assert panel.width() == 400 and fig.plots_h == panel.height() == 300 - fig.title_h - fig.notes_h


def test_a_widget_without_plots_is_refused(qtbot):
    label = QtWidgets.QLabel("no plot")
    qtbot.addWidget(label)
    with pytest.raises(ValueError, match="holds no plot"), figure(label):
        pass
