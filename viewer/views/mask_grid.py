"""Head-mask toggles: a layers x heads grid. Click toggles a head, dragging paints the value the
first cell took onto every cell crossed, right-click on a row masks (or unmasks) the whole layer.
Clear, Invert and the zero/mean ablation choice sit below.

Cells never shrink below a clickable size: a 32 x 32-head model's grid scrolls when the dock is
small, and Ctrl + wheel zooms it (down to cells that fit the dock, up to large ones)."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import (
    QButtonGroup,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from transformer_viewer.model.capture.interventions import ABLATION_HELP

_ON = QColor(200, 50, 50)
_OFF = QColor(225, 232, 240)
_SEL = QColor(30, 30, 30)
MIN_CELL, MAX_CELL = 4.0, 40.0  # the range Ctrl + wheel zooms the cells' smallest size over


class MaskCanvas(QWidget):
    """The painted grid. Emits the whole new mask; the owner decides what to do with it."""

    mask_edited = Signal(object)  # (L, nh) bool
    head_clicked = Signal(int, int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.mask = np.zeros((1, 1), dtype=bool)
        self.selected = (0, 0)
        self._paint_value: bool | None = None
        self._last_cell: tuple[int, int] | None = None
        self.min_cell = 10.0  # smallest cell side in pixels: below it the grid scrolls
        self.setMouseTracking(True)
        self._fit_minimum()

    def set_mask(self, mask: np.ndarray) -> None:
        shape = self.mask.shape
        self.mask = np.array(mask, dtype=bool)
        if self.mask.shape != shape:
            self._fit_minimum()
        self.update()

    def set_min_cell(self, pixels: float) -> None:
        """The smallest cell side (the zoom): the canvas is at least that big per cell."""
        self.min_cell = max(MIN_CELL, min(MAX_CELL, float(pixels)))
        self._fit_minimum()
        self.update()

    def _fit_minimum(self) -> None:
        L, nh = self.mask.shape
        left, top = self._margins()
        c = self.min_cell
        self.setMinimumSize(max(120, int(left + nh * c + 4)), max(60, int(top + L * c + 4)))
        self.updateGeometry()

    def wheelEvent(self, event) -> None:  # noqa: N802
        if event.modifiers() & Qt.ControlModifier:
            self.set_min_cell(self.min_cell * (1.25 if event.angleDelta().y() > 0 else 0.8))
            event.accept()
            return
        super().wheelEvent(event)  # the scroll area scrolls

    def set_selected(self, layer: int, head: int) -> None:
        self.selected = (layer, head)
        self.update()

    # geometry: a label column on the left, a label row on top, square-ish cells
    def _margins(self) -> tuple[int, int]:
        fm = QFontMetrics(self.font())
        return fm.horizontalAdvance("L00") + 8, fm.height() + 4

    def _cell(self) -> float:
        L, nh = self.mask.shape
        left, top = self._margins()
        return max(MIN_CELL, min((self.width() - left - 2) / nh, (self.height() - top - 2) / L,
                                 max(28.0, self.min_cell)))

    def sizeHint(self) -> QSize:  # noqa: N802
        L, nh = self.mask.shape
        left, top = self._margins()
        c = 22 if max(L, nh) <= 12 else 14
        return QSize(left + nh * c + 4, top + L * c + 4)

    def cell_at(self, pos) -> tuple[int, int] | None:
        left, top = self._margins()
        c = self._cell()
        L, nh = self.mask.shape
        col, row = int((pos.x() - left) // c), int((pos.y() - top) // c)
        if pos.x() < left:
            col = -1  # the row label
        if 0 <= row < L and -1 <= col < nh:
            return row, col
        return None

    def paintEvent(self, _event) -> None:  # noqa: N802
        p = QPainter(self)
        L, nh = self.mask.shape
        left, top = self._margins()
        c = self._cell()
        fm = QFontMetrics(self.font())
        p.setPen(self.palette().color(self.palette().ColorRole.WindowText))
        step = max(1, math.ceil((fm.horizontalAdvance(str(nh - 1)) + 2) / c))  # skip labels that would collide
        for h in range(0, nh, step):
            p.drawText(QRectF(left + h * c, 0, c * step, top), Qt.AlignLeft | Qt.AlignVCenter, str(h))
        lstep = max(1, math.ceil(fm.height() / c))
        for layer in range(0, L, lstep):
            p.drawText(QRectF(0, top + layer * c, left - 4, c), Qt.AlignRight | Qt.AlignVCenter, f"L{layer}")
        for layer in range(L):
            for h in range(nh):
                r = QRectF(left + h * c + 1, top + layer * c + 1, c - 2, c - 2)
                p.fillRect(r, _ON if self.mask[layer, h] else _OFF)
        sl, sh = self.selected
        if 0 <= sl < L and 0 <= sh < nh:
            p.setPen(QPen(_SEL, 2))
            p.drawRect(QRectF(left + sh * c + 0.5, top + sl * c + 0.5, c - 1, c - 1))

    def mousePressEvent(self, event) -> None:  # noqa: N802
        cell = self.cell_at(event.position())
        if cell is None:
            return
        layer, head = cell
        mask = self.mask.copy()
        if event.button() == Qt.RightButton:
            mask[layer] = not mask[layer].all()
            self.mask_edited.emit(mask)
            return
        if event.button() != Qt.LeftButton or head < 0:
            if head < 0 and event.button() == Qt.LeftButton:
                mask[layer] = not mask[layer].all()  # a click on the row label: the whole layer
                self.mask_edited.emit(mask)
            return
        self._paint_value = not mask[layer, head]
        self._last_cell = cell
        mask[layer, head] = self._paint_value
        self.head_clicked.emit(layer, head)
        self.mask_edited.emit(mask)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        cell = self.cell_at(event.position())
        if cell is not None and cell[1] >= 0:
            self.setToolTip(f"layer {cell[0]} head {cell[1]}: {'masked' if self.mask[cell] else 'active'}\n"
                            "click: toggle · drag: paint · right-click: whole layer")
        if self._paint_value is None or cell is None or cell[1] < 0 or cell == self._last_cell:
            return
        self._last_cell = cell
        if self.mask[cell] != self._paint_value:
            mask = self.mask.copy()
            mask[cell] = self._paint_value
            self.mask_edited.emit(mask)

    def mouseReleaseEvent(self, _event) -> None:  # noqa: N802
        self._paint_value = None
        self._last_cell = None


class MaskGrid(QWidget):
    """The grid, Clear / Invert buttons, the ablation choice and a count, tied to a ViewerState."""

    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.canvas = MaskCanvas()
        self.canvas.mask_edited.connect(self._edited)
        self.canvas.head_clicked.connect(lambda layer, head: state.set_selection(layer=layer, head=head))
        self.clear_button = QPushButton("Clear")
        self.clear_button.setToolTip("unmask every head")
        self.clear_button.clicked.connect(lambda: self._edited(np.zeros_like(state.mask)))
        self.invert_button = QPushButton("Invert")
        self.invert_button.setToolTip("mask the active heads, unmask the masked ones")
        self.invert_button.clicked.connect(lambda: self._edited(~state.mask))
        self.ablation_buttons: dict[str, QRadioButton] = {}  # one per ablation kind the model knows
        group = QButtonGroup(self)
        for name, help_text in ABLATION_HELP.items():
            button = self.ablation_buttons[name] = QRadioButton(name)
            button.setToolTip(help_text)
            button.toggled.connect(lambda on, name=name: on and state.set_ablation(name))
            group.addButton(button)
        self.ablation_buttons[state.ablation].setChecked(True)
        self.count = QLabel()
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)  # the grid fills the dock, and scrolls past its minimum
        self.scroll.setFrameShape(QScrollArea.NoFrame)
        self.scroll.setWidget(self.canvas)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.clear_button)
        row.addWidget(self.invert_button)
        row.addSpacing(8)
        row.addWidget(QLabel("ablation:"))
        for button in self.ablation_buttons.values():
            row.addWidget(button)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.scroll, 1)
        layout.addLayout(row)
        layout.addWidget(self.count)
        state.mask_changed.connect(self._sync)
        state.model_changed.connect(lambda _info: self._sync())
        state.selection_changed.connect(lambda: self.canvas.set_selected(state.layer, state.head))
        self._sync()

    def _edited(self, mask) -> None:
        if np.shape(mask) == self.state.mask.shape:
            self.state.set_mask(mask)

    def _sync(self, *_args) -> None:
        st = self.state
        self.canvas.set_mask(st.mask)
        self.canvas.set_selected(st.layer, st.head)
        self.ablation_buttons[st.ablation].setChecked(True)
        n = int(st.mask.sum())
        self.count.setText(f"{n} of {st.mask.size} heads masked ({st.ablation} ablation)" if n else
                           "no heads masked: click a head to ablate it")
