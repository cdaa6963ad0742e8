"""Feature clamps in the window: the row of controls that clamps the selected feature (to a value,
scaled, or zeroed; at every position or the selected token), and the list of clamps in force,
each removable, as the head mask lists its heads. Both the features panel and the feature view
carry them; a clamp goes into the state's Intervention (`ViewerState.set_clamps`), so the
next-token panel and every view update as for a head mask.
"""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

# What the kind box offers: (shown, FeatureClamp kind, whether the value box is used)
KINDS = (("set to", "set", True), ("scale by", "scale", True), ("zero", "set", False))


def new_clamp(sae: int, feature: int, kind: str, value: float, position: int | None):
    """The FeatureClamp (model/sae/) of feature `feature` of SAE `sae`: `kind` "set" or
    "scale", at `position` (None: every position). Torch-free: made on the GUI thread."""
    from transformer_viewer.model.capture.interventions import FeatureClamp

    return FeatureClamp(sae=int(sae), feature=int(feature), kind=kind, value=float(value),
                        position=None if position is None else int(position))


def describe_clamp(clamp, state=None) -> str:
    """One line for people: "SAE 0 #12 = 4 at every token", "SAE 1 #7 × 0.5 at 3 'cat'"."""
    value = f"{clamp.value:g}"
    how = (f"= {value}" if clamp.kind == "set" else f"\u00d7 {value}") if not (
        clamp.kind == "set" and clamp.value == 0) else "zeroed"
    where = "at every token"
    if clamp.position is not None:
        where = f"at {clamp.position}"
        trace = getattr(state, "trace", None)
        if trace is not None and clamp.position < trace.n_tokens:
            where += f" {trace.labels[clamp.position]!r}"
    label = state.saes.label(clamp.sae, clamp.feature) if state is not None else ""
    return f"SAE {clamp.sae} #{clamp.feature}{f' ({label})' if label else ''} {how} {where}"


class ClampControls(QtWidgets.QWidget):
    """[set to | scale by | zero] [value] [every token | this token] [Clamp]: clamps the state's
    selected feature (state.saes) when pressed. `rows=2` lays them out on two rows (a side column)."""

    def __init__(self, state, parent=None, rows: int = 1):
        super().__init__(parent)
        self.state = state
        self.kind = QtWidgets.QComboBox()
        for shown, _kind, _uses in KINDS:
            self.kind.addItem(shown)
        self.kind.setToolTip("Set the feature's activation to a value, scale it, or zero it")
        self.value = QtWidgets.QDoubleSpinBox()
        self.value.setRange(-1e4, 1e4)
        self.value.setDecimals(2)
        self.value.setValue(10.0)
        self.value.setToolTip("The activation to set, or the factor to scale it by")
        self.where = QtWidgets.QComboBox()
        self.where.addItems(["every token", "this token"])
        self.where.setToolTip("Clamp at every position, or only at the selected token")
        self.button = QtWidgets.QPushButton("Clamp")
        self.button.setToolTip("Clamp the selected feature: x becomes x + dec(a') \u2212 dec(a), with a' the "
                               "clamped features; every view and the next-token panel update")
        self.button.clicked.connect(self.clamp)
        self.kind.currentIndexChanged.connect(self._on_kind)
        lay = QtWidgets.QGridLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        for i, w in enumerate((self.kind, self.value, self.where, self.button)):
            lay.addWidget(w, i // 2 if rows == 2 else 0, i % 2 if rows == 2 else i)
        lay.setColumnStretch(4, 1)
        state.saes.feature_changed.connect(self._sync)
        self._sync()

    def _on_kind(self, index: int) -> None:
        self.value.setEnabled(KINDS[index][2])
        if KINDS[index][1] == "scale" and self.value.value() == 10.0:
            self.value.setValue(2.0)

    def _sync(self) -> None:
        saes = self.state.saes
        self.button.setEnabled(saes.sae is not None and saes.feature is not None)

    def set_choice(self, kind: str, value: float = 0.0, here: bool = False) -> None:
        """Choose what Clamp does: "set", "scale" or "zero", the value, at the selected token only."""
        self.kind.setCurrentIndex({"set": 0, "scale": 1, "zero": 2}[kind])
        self.value.setValue(float(value))
        self.where.setCurrentIndex(1 if here else 0)

    def clamp(self):
        """Add the clamp the controls describe for the selected feature (replacing one of the
        same feature at the same place); returns it, or None without a selected feature."""
        st, saes = self.state, self.state.saes
        if saes.sae is None or saes.feature is None:
            return None
        _shown, kind, uses_value = KINDS[self.kind.currentIndex()]
        position = st.query_index if self.where.currentIndex() == 1 else None
        clamp = new_clamp(saes.sae, saes.feature, kind, self.value.value() if uses_value else 0.0, position)
        kept = [c for c in st.clamps if (c.sae, c.feature, c.position) != (clamp.sae, clamp.feature, clamp.position)]
        st.set_clamps((*kept, clamp))
        return clamp


class ClampList(QtWidgets.QWidget):
    """The clamps in force, one line each, with Remove (the selected one) and Clear."""

    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state = state
        self.title = QtWidgets.QLabel("No features clamped.")
        self.list = QtWidgets.QListWidget()
        self.list.setMaximumHeight(48)
        self.list.setToolTip("The feature clamps every run applies, with the head mask")
        self.remove_button = QtWidgets.QPushButton("Remove")
        self.remove_button.setToolTip("Remove the selected clamp")
        self.clear_button = QtWidgets.QPushButton("Clear")
        self.clear_button.setToolTip("Remove every clamp (the head mask stays)")
        self.remove_button.clicked.connect(self.remove_selected)
        self.clear_button.clicked.connect(lambda: self.state.set_clamps(()))
        buttons = QtWidgets.QVBoxLayout()
        buttons.addWidget(self.remove_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        row = QtWidgets.QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.list, 1)
        row.addLayout(buttons)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.title)
        lay.addLayout(row)
        state.mask_changed.connect(lambda _m: self.refresh())
        state.saes.labels_changed.connect(lambda _i: self.refresh())
        self.refresh()

    def refresh(self) -> None:
        clamps = self.state.clamps
        self.list.clear()
        for c in clamps:
            item = QtWidgets.QListWidgetItem(describe_clamp(c, self.state))
            item.setData(QtCore.Qt.ItemDataRole.UserRole, c)
            self.list.addItem(item)
        n = len(clamps)
        self.title.setText(f"{n} feature clamp{'s' if n != 1 else ''}:" if n else "No features clamped.")
        self.list.setVisible(bool(n))
        self.remove_button.setVisible(bool(n))
        self.clear_button.setVisible(bool(n))

    def remove(self, clamp) -> None:
        self.state.set_clamps(tuple(c for c in self.state.clamps if c != clamp))

    def remove_selected(self) -> None:
        item = self.list.currentItem() or (self.list.item(0) if self.list.count() == 1 else None)
        if item is not None:
            self.remove(item.data(QtCore.Qt.ItemDataRole.UserRole))
