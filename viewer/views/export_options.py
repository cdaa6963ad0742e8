"""The options File > Export asks before it writes a figure: the theme (light for a page, dark as
on screen) and, for a PNG, its resolution in dots per inch (pixels = the figure's width in
inches x dpi, the figure laid out at the view's on-screen size)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6 import QtWidgets

from transformer_viewer.viewer.figure import CSS_DPI, THEMES

DEFAULT_DPI = 300


@dataclass(frozen=True)
class FigureOptions:
    theme: str = "light"
    dpi: float = DEFAULT_DPI

    @property
    def scale(self) -> float:
        """PNG pixels per logical (on-screen) pixel."""
        return self.dpi / CSS_DPI


class ExportOptionsDialog(QtWidgets.QDialog):
    """Theme and (for PNG) dpi; `options()` is what was chosen."""

    def __init__(self, parent, ext: str, on_screen: tuple[int, int]):
        super().__init__(parent)
        self.setWindowTitle(f"Export as {ext[1:].upper()}")
        form = QtWidgets.QFormLayout(self)
        self.theme_combo = QtWidgets.QComboBox()
        for name in THEMES:
            self.theme_combo.addItem({"light": "Light (white page, for papers)",
                                      "dark": "Dark (as on screen)"}.get(name, name), name)
        form.addRow("Theme", self.theme_combo)
        self.dpi_spin = QtWidgets.QSpinBox()
        self.dpi_spin.setRange(48, 1200)
        self.dpi_spin.setValue(DEFAULT_DPI)
        self.dpi_spin.setSuffix(" dpi")
        w, h = on_screen
        self.size_label = QtWidgets.QLabel()
        self.dpi_spin.valueChanged.connect(lambda dpi: self.size_label.setText(
            f"{w / CSS_DPI:.1f} x {h / CSS_DPI:.1f} in: {round(w * dpi / CSS_DPI)} x {round(h * dpi / CSS_DPI)} px"))
        self.dpi_spin.valueChanged.emit(self.dpi_spin.value())
        if ext == ".png":
            form.addRow("Resolution", self.dpi_spin)
            form.addRow("Size", self.size_label)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Ok
                                             | QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def options(self) -> FigureOptions:
        return FigureOptions(theme=self.theme_combo.currentData(), dpi=float(self.dpi_spin.value()))


def ask_figure_options(parent, ext: str, on_screen: tuple[int, int]) -> FigureOptions | None:
    """The options for a figure export, or None when the user cancels."""
    dialog = ExportOptionsDialog(parent, ext, on_screen)
    return dialog.options() if dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted else None
