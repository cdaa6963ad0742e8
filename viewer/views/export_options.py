"""The options every export of the window asks before it writes a file (File > Export and each
view's Export button): for a figure the theme (light for a page, dark as on screen) and, for a
PNG, its resolution in dots per inch (pixels = the figure's width in inches x dpi, the figure
laid out at the view's on-screen size); for every file whether to write FILE.manifest.json beside
it (on by default), which regenerates it; for an SVG or PDF whether to embed that manifest in
the file itself; and whether to leave the prompt and local paths out of the manifest. A view the
export command cannot rebuild has the manifest boxes off and disabled, their tooltip saying why;
what a regenerated figure would show differently is said under the boxes."""

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
    embed: bool = False  # an SVG or PDF holds the manifest in its own metadata

    @property
    def scale(self) -> float:
        """PNG pixels per logical (on-screen) pixel."""
        return self.dpi / CSS_DPI


class ExportOptionsDialog(QtWidgets.QDialog):
    """Theme and (for PNG) dpi; `options()` is what was chosen."""

    def __init__(self, parent, ext: str, on_screen: tuple[int, int], start: FigureOptions | None = None,
                 no_manifest: str = "", notes: tuple[str, ...] = ()):
        super().__init__(parent)
        start = self.start = start or FigureOptions()  # a box this format lacks keeps its last choice
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
        self.regenerable, self.embeddable = not no_manifest, ext in (".svg", ".pdf")
        self.manifest_box = QtWidgets.QCheckBox("Write FILE.manifest.json beside it, to regenerate it")
        self.manifest_box.setChecked(start.manifest)
        self.embed_box = QtWidgets.QCheckBox("Embed the manifest in the file")
        self.embed_box.setToolTip("The manifest travels inside the figure: `transformer-viewer export "
                                  "--from-manifest FIGURE` regenerates it from the figure alone")
        self.embed_box.setChecked(start.embed)
        self.private_box = QtWidgets.QCheckBox("Leave the prompt and local paths out of the manifest")
        self.private_box.setChecked(start.private)
        self.manifest_box.toggled.connect(self._update_private)
        self.embed_box.toggled.connect(self._update_private)
        form.addRow(self.manifest_box)
        if self.embeddable:
            form.addRow(self.embed_box)
        form.addRow(self.private_box)
        if no_manifest:  # nothing can regenerate it: no manifest, and the boxes say why
            for box in (self.manifest_box, self.embed_box, self.private_box):
                box.setChecked(False)
                box.setEnabled(False)
                box.setToolTip(no_manifest)
        self._update_private()
        lines = ([no_manifest] if no_manifest else []) + [note[:1].upper() + note[1:] + "." for note in notes]
        self.notes_label = QtWidgets.QLabel("\n".join(lines))
        self.notes_label.setWordWrap(True)
        if lines:
            form.addRow(self.notes_label)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Ok
                                             | QtWidgets.QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _update_private(self) -> None:
        self.private_box.setEnabled(self.regenerable and (self.manifest_box.isChecked()
                                                          or (self.embeddable and self.embed_box.isChecked())))

    def options(self) -> FigureOptions:
        return FigureOptions(theme=self.theme_combo.currentData(), dpi=float(self.dpi_spin.value()),
                             manifest=self.manifest_box.isChecked(), private=self.private_box.isChecked(),
                             embed=self.embed_box.isChecked() if self.embeddable else self.start.embed)


def ask_figure_options(parent, ext: str, on_screen: tuple[int, int], start: FigureOptions | None = None,
                       no_manifest: str = "", notes: tuple[str, ...] = ()) -> FigureOptions | None:
    """The options for an export (starting from `start`), or None when the user cancels;
    `no_manifest`: why this view cannot have a manifest ("": it can); `notes`: what a figure
    regenerated from the manifest shows differently."""
    dialog = ExportOptionsDialog(parent, ext, on_screen, start, no_manifest, notes)
    return dialog.options() if dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted else None
