"""What the window knows about sparse autoencoders: the SAEs attached to the worker's session,
which SAE and feature are selected, each SAE's feature labels, and whether the BOS token is
left out of the feature lists. `ViewerState.saes` holds one; views read it and change it
through its setters. The clamps themselves are part of the state's Intervention
(`ViewerState.set_clamps`), so every run under them is asked for as a head mask's is.

Signals (each emitted only when the value really changed):
- `saes_changed()`: an SAE was attached, or all were let go with the model that held them.
- `feature_changed()`: the selected SAE or feature changed.
- `labels_changed(int)`: the labels of that SAE changed.
- `bos_changed(bool)`: the BOS token is shown in the lists (True) or left out.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal


class SaeState(QObject):
    saes_changed = Signal()
    feature_changed = Signal()
    labels_changed = Signal(int)
    bos_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.attached: tuple = ()  # AttachedSae (viewer/worker/sae.py), by their session index
        self.sae: int | None = None  # the selected SAE's index
        self.feature: int | None = None  # the selected feature of that SAE
        self.show_bos = False
        self._labels: dict[int, dict[int, str]] = {}

    # -- reading --------------------------------------------------------------------------
    def selected(self):
        """The selected AttachedSae, or None."""
        return self.by_index(self.sae)

    def by_index(self, index: int | None):
        return next((s for s in self.attached if s.index == index), None)

    def label(self, sae: int, feature: int) -> str:
        """The label of `feature` of SAE `sae` from its labels file ("" without one)."""
        return self._labels.get(sae, {}).get(int(feature), "")

    def has_labels(self, sae: int) -> bool:
        return bool(self._labels.get(sae))

    # -- setters --------------------------------------------------------------------------
    def add(self, sae) -> None:
        """An SAE the worker attached; it becomes the selected one."""
        self.attached = tuple(s for s in self.attached if s.index != sae.index) + (sae,)
        if sae.labels:
            self._labels[sae.index] = dict(sae.labels)
        self.saes_changed.emit()
        self.select(sae.index, None)

    def clear(self) -> None:
        """The worker's session went (another model): its SAEs went with it."""
        if not self.attached and self.sae is None:
            return
        self.attached = ()
        self._labels = {}
        self.saes_changed.emit()
        self.select(None, None)

    def select(self, sae: int | None, feature: int | None = None) -> None:
        """Select SAE `sae` (None: none) and its feature `feature` (None: none yet)."""
        info = self.by_index(sae)
        if info is None:
            sae, feature = None, None
        elif feature is not None:
            feature = max(0, min(int(feature), info.d_sae - 1))
        if (sae, feature) != (self.sae, self.feature):
            self.sae, self.feature = sae, feature
            self.feature_changed.emit()

    def set_feature(self, feature: int | None) -> None:
        self.select(self.sae, feature)

    def set_labels(self, sae: int, labels: dict) -> None:
        self._labels[sae] = {int(k): str(v) for k, v in labels.items()}
        self.labels_changed.emit(int(sae))

    def set_show_bos(self, show: bool) -> None:
        if bool(show) != self.show_bos:
            self.show_bos = bool(show)
            self.bos_changed.emit(self.show_bos)
