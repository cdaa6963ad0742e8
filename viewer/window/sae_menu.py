"""Sparse autoencoders in the main window: File > Open SAE…, Open the bundled SAE, Open feature
labels…, and what happens to the attached SAEs when a model loads.

An SAE is read and attached on the worker (`SaeLoadRequest`, with progress and Cancel in the
status bar); its info line and warnings go to the status bar and the features panel. A file that
cannot be used is one line in a message box, and everything the window had stays. A new model
is a new worker session: the SAEs and clamps of the old one go with it. The bundled model
opens with the SAE that ships with it attached (when it is installed), and `--sae` specs
(`transformer-viewer --sae PATH[@HOOK]`) are opened once the model has loaded.
"""

from __future__ import annotations

import os

from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

LABELS_FILTER = "Feature labels (*.csv *.json);;All files (*)"
BUNDLED_LABELS = "labels.csv"  # beside the bundled SAE's weights (assets/SAE.md)


def bundled_sae() -> tuple[str, str | None] | None:
    """(folder, labels file or None) of the SAE that ships with the bundled model, or None when
    it is not installed."""
    from transformer_viewer.model.checkpoints.bundled import bundled_sae_path  # no torch

    folder = bundled_sae_path()
    if not os.path.isfile(os.path.join(folder, "cfg.json")):
        return None
    labels = os.path.join(folder, BUNDLED_LABELS)
    return folder, (labels if os.path.isfile(labels) else None)


class OpenSaeDialog(QDialog):
    """Where the SAE is (a folder, a params.npz, or REPO_ID/SUBFOLDER in the local Hugging Face
    cache) and, for weights alone, its hook point."""

    def __init__(self, parent=None, start_dir: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Open SAE")
        self.start_dir = start_dir
        self.path = QLineEdit()
        self.path.setPlaceholderText("an SAELens folder, a params.npz, or REPO_ID/SUBFOLDER from the cache")
        self.path.setMinimumWidth(420)
        self.hook = QLineEdit()
        self.hook.setPlaceholderText("e.g. blocks.2.hook_resid_post (a params.npz needs it)")
        folder = QPushButton("Folder\u2026")
        file = QPushButton("params.npz\u2026")
        folder.clicked.connect(self._pick_folder)
        file.clicked.connect(self._pick_file)
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(folder)
        row.addWidget(file)
        holder = QWidget()
        holder.setLayout(row)
        row.setContentsMargins(0, 0, 0, 0)
        form = QFormLayout()
        form.addRow("SAE", holder)
        form.addRow("hook point", self.hook)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(buttons)

    def _pick_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "SAELens folder (cfg.json and sae_weights.safetensors)",
                                                self.start_dir)
        if path:
            self.path.setText(path)

    def _pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Gemma Scope params.npz", self.start_dir,
                                              "SAE weights (*.npz);;All files (*)")
        if path:
            self.path.setText(path)

    def spec(self) -> tuple[str, str | None]:
        return self.path.text().strip(), (self.hook.text().strip() or None)


class SaeMenu:
    def __init__(self, window):
        self.w = window
        self._when_loaded: list[str] = []  # --sae specs waiting for the model
        self._last_dir = ""
        self.first_failure: str | None = None  # the first SAE that failed to open (--screenshot reports it)
        menu = window.actions_.file_menu
        anchor = window.actions_.recent_menu.menuAction()
        self.open_action = self._action(menu, anchor, "Open &SAE\u2026", self.open_dialog,
                                        "a sparse autoencoder for the loaded model: an SAELens folder, a Gemma Scope "
                                        "params.npz with its hook point, or REPO_ID/SUBFOLDER in the local cache")
        self.bundled_action = self._action(menu, anchor, "Open the bundled S&AE", self.open_bundled,
                                           "the SAE that ships with the bundled model")
        self.labels_action = self._action(menu, anchor, "Open feature &labels\u2026", self.labels_dialog,
                                          "labels for the selected SAE's features: a CSV of id,label or a "
                                          "Neuronpedia explanations JSON")
        menu.insertSeparator(anchor)
        self.panel = window.views["token-features"]
        self.panel.open_bundled.connect(self.open_bundled)
        self.panel.feature_activated.connect(lambda _f: window.show_view("features"))
        self.bundled_action.setEnabled(bundled_sae() is not None)
        self.view_action = self._action(window.actions_.view_menu, None, "SAE &feature",
                                        lambda: window.show_view("features"),
                                        "the selected SAE feature across the prompt, its effect on the logits and "
                                        "the layer's overview (a tab shown when asked for)")

    def _action(self, menu, before, text, slot, tip) -> QAction:
        a = QAction(text, self.w)
        a.setToolTip(tip)
        a.setStatusTip(tip)
        a.triggered.connect(lambda _c=False: slot())
        if before is None:
            menu.addAction(a)
        else:
            menu.insertAction(before, a)
        return a

    # -- opening --------------------------------------------------------------------------
    def open_dialog(self) -> None:
        dialog = OpenSaeDialog(self.w, self._last_dir or os.getcwd())
        if dialog.exec() == QDialog.Accepted:
            path, hook = dialog.spec()
            if path:
                self.open(path, hook)

    def open(self, spec: str, hook: str | None = None, labels: str | None = None):
        """Read and attach the SAE `spec` (PATH[@HOOK]) on the worker; returns its handle, or
        None (one line shown) without a model to attach it to."""
        from transformer_viewer.viewer.worker.sae import SaeLoadRequest

        if self.w.state.model_info is None:
            self.w.show_error("open a model first: an SAE reads one of its layers")
            return None
        if os.path.exists(spec):
            self._last_dir = os.path.dirname(os.path.abspath(spec))
        return self.w.worker.submit(SaeLoadRequest(spec=spec, hook=hook, labels=labels),
                                    on_result=self._on_attached, on_failure=self._on_failed)

    def open_bundled(self):
        found = bundled_sae()
        if found is None:
            self.w.show_error("the bundled SAE is not installed; open one with File > Open SAE\u2026")
            return None
        return self.open(found[0], labels=found[1])

    def open_when_loaded(self, specs) -> None:
        """Open these `--sae` specs once the next model has loaded."""
        self._when_loaded.extend(specs)

    def model_loaded(self, new_session: bool) -> None:
        """A model arrived. `new_session`: a load (not a device move): its SAEs and clamps are gone."""
        from transformer_viewer.model.checkpoints.bundled import is_bundled

        st = self.w.state
        if not new_session:
            return
        st.saes.clear()
        if st.clamps:
            st.set_clamps(())
        bundled = is_bundled(st.model_info.source) and bundled_sae() is not None
        self.panel.set_bundled_offer(bundled)
        specs, self._when_loaded = self._when_loaded, []
        for spec in specs:
            self.open(spec)
        if bundled and not specs:
            self.open_bundled()

    def _on_attached(self, answer) -> None:
        sae = answer.value
        self.w.state.saes.add(sae)
        line = sae.info + ("; " + "; ".join(sae.warnings) if sae.warnings else "")
        self.w.status.showMessage(line, 10000)

    def _on_failed(self, failure) -> None:
        if failure.cancelled:
            self.w.status.showMessage("opening the SAE cancelled", 5000)
            return
        self.first_failure = self.first_failure or failure.message
        self.w.show_error(failure.message)

    # -- labels ---------------------------------------------------------------------------
    def labels_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w, "Open feature labels", self._last_dir or os.getcwd(),
                                              LABELS_FILTER)
        if path:
            self.open_labels(path)

    def open_labels(self, path: str):
        """Read `path` as the selected SAE's labels on the worker; returns its handle, or None
        (one line shown) without an SAE."""
        from transformer_viewer.viewer.worker.sae import SaeLabelsRequest

        sae = self.w.state.saes.selected()
        if sae is None:
            self.w.show_error("open an SAE first (File > Open SAE\u2026): labels name its features")
            return None
        return self.w.worker.submit(SaeLabelsRequest(path=path, sae_index=sae.index, d_sae=sae.d_sae),
                                    on_result=self._on_labels, on_failure=self._on_failed)

    def _on_labels(self, answer) -> None:
        value = answer.value
        if self.w.state.saes.by_index(value.sae_index) is None:
            return  # its SAE went with a model since
        self.w.state.saes.set_labels(value.sae_index, value.labels)
        self.w.status.showMessage(f"{len(value.labels):,} feature labels from {os.path.basename(value.path)}", 8000)


def install(window) -> SaeMenu:
    return SaeMenu(window)
