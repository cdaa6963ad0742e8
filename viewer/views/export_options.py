"""The options File > Export asks before it writes a file: for a figure the theme (light for a
page, dark as on screen) and, for a PNG, its resolution in dots per inch (pixels = the figure's
width in inches x dpi, the figure laid out at the view's on-screen size); for every file whether
to write FILE.manifest.json beside it (on by default), which regenerates it, and whether to
leave the prompt and local paths out of that manifest."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6 import QtWidgets

from transformer_viewer.viewer.figure import CSS_DPI, THEMES

DEFAULT_DPI = 300


@dataclass(frozen=True)
class FigureOptions:
    theme: str = "light"
    dpi: float = DEFAULT_DPI
    manifest: bool = True  # write FILE.manifest.json beside the export
    private: bool = False  # leave the prompt and local paths out of the manifest

    @property
    def scale(self) -> float:
        """PNG pixels per logical (on-screen) pixel."""
        return self.dpi / CSS_DPI


class ExportOptionsDialog(QtWidgets.QDialog):
    """Theme and (for PNG) dpi; `options()` is what was chosen."""

    def __init__(self, parent, ext: str, on_screen: tuple[int, int], start: FigureOptions | None = None):
        super().__init__(parent)
        start = start or FigureOptions()
        self.setWindowTitle(f"Export as {ext[1:].upper()}")
        form = QtWidgets.QFormLayout(self)
        self.theme_combo = QtWidgets.QComboBox()
        for name in THEMES:
            self.theme_combo.addItem({"light": "Light (white page, for papers)",
                                      "dark": "Dark (as on screen)"}.get(name, name), name)
        self.theme_combo.setCurrentIndex(max(0, self.theme_combo.findData(start.theme)))
        if ext in (".png", ".svg", ".pdf"):
            form.addRow("Theme", self.theme_combo)
        self.dpi_spin = QtWidgets.QSpinBox()
        self.dpi_spin.setRange(48, 1200)
        self.dpi_spin.setValue(round(start.dpi))
        self.dpi_spin.setSuffix(" dpi")
        w, h = on_screen
        self.size_label = QtWidgets.QLabel()
        self.dpi_spin.valueChanged.connect(lambda dpi: self.size_label.setText(
            f"{w / CSS_DPI:.1f} x {h / CSS_DPI:.1f} in: {round(w * dpi / CSS_DPI)} x {round(h * dpi / CSS_DPI)} px"))
        self.dpi_spin.valueChanged.emit(self.dpi_spin.value())
        if ext == ".png":
            form.addRow("Resolution", self.dpi_spin)
            form.addRow("Size", self.size_label)
        self.manifest_box = QtWidgets.QCheckBox("Write FILE.manifest.json beside it, to regenerate it")
        self.manifest_box.setChecked(start.manifest)
        self.private_box = QtWidgets.QCheckBox("Leave the prompt and local paths out of the manifest")
        self.private_box.setChecked(start.private)
        self.manifest_box.toggled.connect(self.private_box.setEnabled)
        self.private_box.setEnabled(start.manifest)
        form.addRow(self.manifest_box)
        form.addRow(self.private_box)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Ok
                                             | QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def options(self) -> FigureOptions:
        return FigureOptions(theme=self.theme_combo.currentData(), dpi=float(self.dpi_spin.value()),
                             manifest=self.manifest_box.isChecked(), private=self.private_box.isChecked())


def ask_figure_options(parent, ext: str, on_screen: tuple[int, int],
                       start: FigureOptions | None = None) -> FigureOptions | None:
    """The options for an export (starting from `start`), or None when the user cancels."""
    dialog = ExportOptionsDialog(parent, ext, on_screen, start)
    return dialog.options() if dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted else None
