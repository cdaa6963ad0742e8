"""The export options a figure export asks for (theme, dpi), and a view's own Export button
writing a titled figure in the chosen theme."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from PySide6 import QtGui

from tests.helpers.window import PROMPT, new_window, wait_idle
from transformer_viewer.viewer.views.export_options import ExportOptionsDialog


def test_the_export_options_dialog_offers_theme_and_dpi(qtbot):
    dialog = ExportOptionsDialog(None, ".png", (900, 600))
    qtbot.addWidget(dialog)
    assert dialog.options().theme == "light" and dialog.options().dpi == 300
    dialog.theme_combo.setCurrentIndex(dialog.theme_combo.findData("dark"))
    dialog.dpi_spin.setValue(192)
    assert dialog.options().theme == "dark" and dialog.options().scale == 2.0
    assert "1800 x 1200 px" in dialog.size_label.text()


def test_a_views_export_button_writes_a_titled_figure_in_the_theme(qtbot, tmp_path, tiny_ckpt):
    window = new_window(qtbot, tmp_path, tiny_ckpt, prompt=PROMPT)
    window.show_view("residual")
    view = window.views["residual"]
    qtbot.waitUntil(view.isVisible)
    wait_idle(qtbot, window)
    for theme, page in (("light", (255, 255, 255)), ("dark", (0, 0, 0))):
        png = view.export_button.export(str(tmp_path / f"{theme}.png"), scale=1.0, theme=theme)
        assert png is not None
        assert QtGui.QColor(QtGui.QImage(png).pixel(1, 1)).getRgb()[:3] == page
    svg = view.export_button.export(str(tmp_path / "r.svg"))
    texts = ["".join(t.itertext()) for t in ET.parse(svg).getroot().iter("{http://www.w3.org/2000/svg}text")]
    assert texts[0].endswith("Residual stream \u2014 nothing masked") and "Reset zoom" not in texts
    window.close()
