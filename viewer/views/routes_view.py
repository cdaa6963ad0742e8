"""Information-flow routes (model/analysis/routes.py) as a graph: rows are the residual stream's levels
(the token embeddings at the bottom, then after each layer's attention and after each layer),
columns are token positions; a node where the route passes, an edge per part kept, its width by
its contribution (blue: attention, grey: the residual, orange: an MLP, drawn beside the column).

Hovering names a node or an edge with its numbers (an attention edge with its split per head);
clicking an attention edge selects its layer, its largest head and its query position in every
view (the route stays where it is). The route leads to the selected query position (the last
token by default); a threshold slider and "renormalise after threshold" rebuild it. While the
tab is shown, the token strip colours each token by its share of the route: the sum over the
paths from the chosen position down to that token of the products of the edges' contributions.

Computed on the worker (a RoutesRequest per trace, position, threshold and renormalisation)
while the view is shown, with progress and the status bar's Cancel.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from transformer_viewer.viewer.views.answers import same_request
from transformer_viewer.viewer.views.empty_state import EmptyState
from transformer_viewer.viewer.views.parts import ExportButton, bar_over, view_bar
from transformer_viewer.viewer.views.token_axis import short_label

KINDS = ("embed", "attn", "mlp", "out")  # model/analysis/routes.py's node kinds, by index
EDGE_KINDS = ("attention", "residual", "mlp")
EDGE_RGB = {0: (40, 100, 200), 1: (140, 140, 140), 2: (235, 140, 30)}
NODE_RGB = {0: (60, 60, 60), 1: (40, 100, 200), 2: (235, 140, 30), 3: (60, 60, 60)}
MLP_DX = 0.35  # an MLP node sits beside its column, as the transparency tool draws it
MAX_WIDTH_PX = 9.0  # an edge of contribution 1
NODE_RADIUS_PX = 4.0
PICK_PX = 6.0  # how near the pointer must be to an edge or a node to name it
SLIDER_STEPS = 100  # the threshold slider runs 0..0.5 in steps of 0.005
SHARE_LEGEND = ("share of the route to {label!r} ({p}): the sum over paths of the products of edge "
                "contributions")
MATRIX_COLUMNS = ("source kind", "source layer", "source position", "target kind", "target layer",
                  "target position", "edge kind", "contribution")


def node_xy(nodes: np.ndarray) -> np.ndarray:
    """(N, 2) plot coordinates of nodes (N, 3) kind/layer/position: x the position (an MLP
    beside it), y the level: 0 the embeddings, 2l + 1 after layer l's attention, 2l + 2 after
    layer l, 2l + 1.5 layer l's MLP."""
    kind, layer, pos = nodes[:, 0], nodes[:, 1], nodes[:, 2]
    x = pos.astype(float) + np.where(kind == 2, MLP_DX, 0.0)
    y = np.select([kind == 0, kind == 1, kind == 2], [0.0, 2.0 * layer + 1, 2.0 * layer + 1.5], 2.0 * layer + 2)
    return np.stack([x, y], axis=1)


def segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance from point p (2,) to each segment a[i]-b[i] (n, 2)."""
    ab = b - a
    t = np.clip(((p - a) * ab).sum(axis=1) / np.maximum((ab * ab).sum(axis=1), 1e-12), 0.0, 1.0)
    return np.hypot(*(a + t[:, None] * ab - p).T)


class RouteGraphItem(pg.GraphicsObject):
    """The route's edges and nodes, in plot coordinates, painted in device pixels: an edge's
    width is its contribution at every zoom and in every export (an SVG stroke of a plain width,
    which every renderer draws alike, rather than a cosmetic pen)."""

    def __init__(self, xy: np.ndarray, routes):
        super().__init__()
        self.xy, self.r = xy, routes
        lo, hi = xy.min(axis=0), xy.max(axis=0)
        self._rect = QtCore.QRectF(lo[0], lo[1], max(hi[0] - lo[0], 1e-6), max(hi[1] - lo[1], 1e-6))

    def boundingRect(self) -> QtCore.QRectF:
        return self._rect

    def paint(self, painter, _option, _widget=None) -> None:
        r, xy = self.r, self.xy
        t = painter.transform()
        painter.save()
        painter.resetTransform()
        painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing)

        def at(i: int) -> QtCore.QPointF:
            return t.map(QtCore.QPointF(float(xy[i, 0]), float(xy[i, 1])))

        order = np.lexsort((r.weight, r.edge_kind != 0))  # residual and MLP first, attention on top; thin first
        for e in order:
            kind = int(r.edge_kind[e])
            pen = QtGui.QPen(QtGui.QColor(*EDGE_RGB[kind], 210), max(0.6, MAX_WIDTH_PX * float(r.weight[e])))
            pen.setCapStyle(QtCore.Qt.PenCapStyle.RoundCap)
            painter.setPen(pen)
            painter.drawLine(at(int(r.edges[e, 0])), at(int(r.edges[e, 1])))
        painter.setPen(QtGui.QPen(QtGui.QColor(255, 255, 255), 1.0))
        for i, kind in enumerate(r.nodes[:, 0]):
            painter.setBrush(QtGui.QColor(*NODE_RGB[int(kind)]))
            painter.drawEllipse(at(i), NODE_RADIUS_PX, NODE_RADIUS_PX)
        painter.restore()


class RoutesView(QtWidgets.QWidget):
    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.result = None  # Routes drawn
        self.labels: tuple[str, ...] = ()  # the tokens of the drawn result
        self.position: int | None = None  # where the route leads; None: the selected query
        self._asked = None  # (trace, position, threshold, renormalize) last asked for
        self._pending = None
        self._own_click = False  # a selection this view made: the route stays where it is
        self._query_seen: int | None = None  # the selected query when the view last asked
        self.dropped = 0
        self.plot = pg.PlotWidget()
        self.plot.setBackground("w")
        item = self.plot.getPlotItem()
        item.setMenuEnabled(False)
        item.hideButtons()
        for side in ("left", "bottom"):
            axis = item.getAxis(side)
            axis.setPen("k")
            axis.setTextPen("k")
        item.getAxis("left").setWidth(70)
        self.plot.setMouseTracking(True)
        self.threshold = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
        self.threshold.setRange(0, SLIDER_STEPS)
        self.threshold.setValue(8)  # 0.04, the transparency tool's default
        self.threshold.setFixedWidth(140)
        self.threshold.setToolTip("Parts whose contribution to a residual position is at or below this are dropped")
        self.threshold_label = QtWidgets.QLabel()
        self.renormalize = QtWidgets.QCheckBox("renormalise after threshold")
        self.renormalize.setChecked(True)
        self.renormalize.setToolTip("Rescale the kept parts at each node to sum to 1 again")
        self.info = QtWidgets.QLabel("computing the routes\u2026")
        self.info.setWordWrap(True)
        self.hover_label = QtWidgets.QLabel(" ")
        self.hover_label.setWordWrap(True)
        self.export_button = ExportButton(self, "routes")
        bar = view_bar(self.info, self.export_button, QtWidgets.QLabel("threshold"), self.threshold,
                       self.threshold_label, self.renormalize)
        page = QtWidgets.QWidget()
        layout = QtWidgets.QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.hover_label)
        bar_over(self, bar, page)
        self.cover = EmptyState(self.plot)
        self.cover.show_message("computing the routes\u2026")
        self._debounce = QtCore.QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(150)
        self._debounce.timeout.connect(self.request)
        self.threshold.valueChanged.connect(self._on_threshold)
        self.renormalize.toggled.connect(lambda _on: self.request())
        self._on_threshold(self.threshold.value(), ask=False)
        scene = self.plot.scene()
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)
        state.trace_changed.connect(self._on_trace)
        state.selection_changed.connect(self._on_selection)

    # -- controls -------------------------------------------------------------------------
    def threshold_value(self) -> float:
        return self.threshold.value() * 0.5 / SLIDER_STEPS

    def set_threshold(self, value: float) -> None:
        self.threshold.setValue(round(float(value) * SLIDER_STEPS / 0.5))

    def _on_threshold(self, _v: int, ask: bool = True) -> None:
        self.threshold_label.setText(f"{self.threshold_value():.3f}")
        if ask:
            self._debounce.start()

    def _on_selection(self) -> None:
        if self._own_click:
            return
        if self.state.query_index != self._query_seen:  # another query selected: the route follows it
            self.position = None
        self.request()

    def _on_trace(self, trace) -> None:
        self.state.set_token_overlay(None, owner=self)  # the shares were of another run
        if trace is None or trace.labels != self.labels:  # another prompt: follow the selected query again
            self.position = None
        if trace is None:
            self.result = None
            self._draw()
            self._say("run a prompt to see the routes to a position")
        self.request()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        self.request()
        self._publish_shares()

    def hideEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().hideEvent(event)
        self.state.set_token_overlay(None, owner=self)  # the token strip colours by its own mode again

    def _say(self, text: str) -> None:
        self.info.setText(text)
        self.cover.show_message(text if self.result is None else None)

    # -- requests -------------------------------------------------------------------------
    def target_position(self) -> int | None:
        st = self.state
        if st.trace is None:
            return None
        if self.position is not None and self.position < st.trace.n_tokens:
            return self.position
        return st.query_index

    def request(self) -> None:
        """Ask for the routes of the shown trace to the chosen position, once each."""
        from transformer_viewer.viewer.worker.routes import RoutesRequest

        st = self.state
        if st.trace is None or not self.isVisible():
            return
        self._query_seen = st.query_index
        # The run, not the Trace object: a second pass over the same run (its log-probabilities)
        # changes no route.
        want = (st.trace.run_id, self.target_position(), self.threshold_value(), self.renormalize.isChecked())
        if self._asked == want:
            return
        self._asked = want
        self._say(f"computing the routes to position {want[1]}\u2026")
        request = RoutesRequest(text=st.prompt, position=want[1], threshold=want[2], renormalize=want[3],
                                intervention=st.trace.intervention)
        self._pending = request
        self.worker.submit(request, on_result=self._on_result, on_failure=self._on_failed)

    def _on_result(self, answer) -> None:
        if not same_request(answer.request, self._pending):
            self.dropped += 1  # asked for something else since
            return
        self._pending = None
        trace = self.state.trace
        self.set_result(answer.value, trace.labels if trace is not None else ())

    def _on_failed(self, failure) -> None:
        self._asked = None
        self._pending = None
        stopped = "stopped" if failure.cancelled else failure.message
        self._say(f"routes {stopped}; select a token or show this tab again to compute them")

    # -- drawing --------------------------------------------------------------------------
    def set_result(self, routes, labels) -> None:
        """Draw `routes` over the prompt's token `labels`."""
        self.result, self.labels = routes, tuple(labels)
        self._draw()
        r = routes
        label = self.labels[r.position] if r.position < len(self.labels) else str(r.position)
        renorm = ", renormalised" if r.renormalized else ""
        self._say(f"routes to {label!r} ({r.position}), threshold {r.threshold:g}{renorm}: {len(r.nodes)} nodes, "
                  f"{len(r.edges)} edges, {r.expanded} nodes expanded; line width = contribution")
        self._publish_shares()

    def _publish_shares(self) -> None:
        r, trace = self.result, self.state.trace
        if r is None or trace is None or not self.isVisible() or len(r.token_share) != trace.n_tokens:
            return
        label = self.labels[r.position] if r.position < len(self.labels) else str(r.position)
        self.state.set_token_overlay(r.token_share, SHARE_LEGEND.format(label=label, p=r.position), owner=self)

    def _draw(self) -> None:
        item = self.plot.getPlotItem()
        item.clear()
        r = self.result
        if r is None or len(r.nodes) == 0:
            return
        xy = node_xy(r.nodes)
        self._xy = xy
        item.addItem(RouteGraphItem(xy, r))
        L = r.n_layer
        levels = [(0.0, "embed")]
        for layer in range(L):
            levels += [(2.0 * layer + 1, f"L{layer} attn"), (2.0 * layer + 2, f"L{layer} out")]
        item.getAxis("left").setTicks([levels])
        label = self.labels[r.position] if r.position < len(self.labels) else str(r.position)
        item.setTitle(f"routes to {label!r} ({r.position}); blue: attention, grey: residual, orange: MLP; "
                      f"width: contribution", size="9pt", color="k")
        positions = sorted({int(p) for p in r.nodes[:, 2]})
        every = max(1, len(positions) // 40)
        ticks = [(float(p), f"{p} {short_label(self.labels[p], 8)}" if p < len(self.labels) else str(p))
                 for p in positions[::every]]
        item.getAxis("bottom").setTicks([ticks])
        lo, hi = min(positions), max(positions)
        item.setXRange(lo - 0.6, hi + 0.6 + MLP_DX, padding=0.02)
        item.setYRange(-0.4, 2.0 * L + 0.4, padding=0.02)

    # -- hover and click ------------------------------------------------------------------
    def pick(self, view_point) -> tuple[str, int] | None:
        """("node", i) or ("edge", e) near `view_point` (plot coordinates), or None."""
        r = self.result
        if r is None or len(r.nodes) == 0:
            return None
        pw, ph = self.plot.getPlotItem().getViewBox().viewPixelSize()
        scale = np.array([1.0 / max(pw, 1e-12), 1.0 / max(ph, 1e-12)])
        p = np.array([view_point.x(), view_point.y()]) * scale
        xy = self._xy * scale
        d_node = np.hypot(*(xy - p).T)
        i = int(np.argmin(d_node))
        if d_node[i] <= PICK_PX:
            return "node", i
        if len(r.edges):
            d = segment_distance(p, xy[r.edges[:, 0]], xy[r.edges[:, 1]])
            e = int(np.argmin(d))
            if d[e] <= PICK_PX + MAX_WIDTH_PX * float(r.weight[e]) / 2:
                return "edge", e
        return None

    def describe(self, picked) -> str:
        """The hover text of a node or an edge."""
        r = self.result
        what, i = picked

        def token(pos: int) -> str:
            return f"{self.labels[pos]!r} ({pos})" if pos < len(self.labels) else f"({pos})"

        if what == "node":
            kind, layer, pos = (int(v) for v in r.nodes[i])
            place = {0: "token embedding", 1: f"after layer {layer}'s attention", 2: f"layer {layer}'s MLP",
                     3: f"after layer {layer}"}[kind]
            into = r.weight[r.edges[:, 1] == i]
            text = f"{r.node_name(i)}: {place} at {token(pos)}"
            if kind == 0:
                text += f"; share of the route {float(r.token_share[pos]):.4f}"
            elif into.size:
                text += f"; {into.size} parts kept, contributions {float(into.sum()):.3f} in all"
            return text
        s, d = (int(v) for v in r.edges[i])
        kind = int(r.edge_kind[i])
        text = (f"{EDGE_KINDS[kind]} edge {r.node_name(s)} -> {r.node_name(d)}: contribution {float(r.weight[i]):.4f}")
        if kind == 0:
            heads = r.head_weight[i]
            order = [h for h in np.argsort(-heads) if heads[h] > 0]
            layer = int(r.nodes[d, 1])
            text += (f"; from {token(int(r.nodes[s, 2]))} to {token(int(r.nodes[d, 2]))} through layer {layer}: "
                     + ", ".join(f"H{h} {float(heads[h]):.4f}" for h in order))
        return text

    def _on_mouse_moved(self, scene_pos) -> None:
        vb = self.plot.getPlotItem().getViewBox()
        if self.result is None or not vb.sceneBoundingRect().contains(scene_pos):
            self.hover_label.setText(" ")
            return
        picked = self.pick(vb.mapSceneToView(scene_pos))
        self.hover_label.setText(self.describe(picked) if picked else " ")

    def _on_mouse_clicked(self, event) -> None:
        if event.button() != QtCore.Qt.MouseButton.LeftButton or self.result is None:
            return
        vb = self.plot.getPlotItem().getViewBox()
        picked = self.pick(vb.mapSceneToView(event.scenePos()))
        if picked is not None and picked[0] == "edge":
            self.select_edge(picked[1])

    def select_edge(self, e: int) -> None:
        """An attention edge: select its layer, its largest head and its query in every view."""
        r = self.result
        if int(r.edge_kind[e]) != 0:
            return
        d = int(r.edges[e, 1])
        layer, query = int(r.nodes[d, 1]), int(r.nodes[d, 2])
        head = int(np.argmax(r.head_weight[e]))
        self.position = r.position
        self._own_click = True
        try:
            self.state.set_selection(layer=layer, head=head, query=query)
        finally:
            self._own_click = False
        self._query_seen = self.state.query_index

    # -- export ---------------------------------------------------------------------------
    def export_target(self):
        return self.plot

    def matrix(self) -> np.ndarray:
        """One row per edge: its source and target (kind, layer, position), its kind and contribution."""
        r = self.result
        if r is None:
            return np.zeros((0, len(MATRIX_COLUMNS)), dtype=np.float32)
        s, d = r.nodes[r.edges[:, 0]], r.nodes[r.edges[:, 1]]
        return np.concatenate([s, d, r.edge_kind[:, None], r.weight[:, None]], axis=1).astype(np.float32)

    def row_labels(self) -> tuple[str, ...]:
        r = self.result
        return () if r is None else tuple(f"{r.node_name(int(a))}->{r.node_name(int(b))}" for a, b in r.edges)

    def col_labels(self) -> tuple[str, ...]:
        return MATRIX_COLUMNS

    def sizeHint(self) -> QtCore.QSize:
        return QtCore.QSize(900, 640)
