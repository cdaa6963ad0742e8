"""The main window: one ViewerState, one worker thread, and the views wired between them.

Data flow: the prompt editor, mask grid and token strip change `state`; every change that
needs the model becomes a `TraceRequest` for the worker (newest wins, stale answers dropped);
the answer is installed with `state.set_traces`, and every view redraws from its signals.

Issue-5 views: build a widget that takes `window.state` (and `window.worker` to submit its own
requests), then `window.add_view_dock("Residual stream", widget)` (listed in the View menu) or,
for a view that needs room, `window.add_view_tab("Residual stream", widget)` beside the heatmap.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from transformer_viewer.viewer import preview, window_actions
from transformer_viewer.viewer.gc_guard import collect_on_gui_thread
from transformer_viewer.viewer.requests import (
    DeviceRequest,
    LoadRequest,
    LoadResult,
    PredictRequest,
    PredictResult,
    ProbeRequest,
    ProbeResult,
    TraceRequest,
    TraceResult,
)
from transformer_viewer.viewer.state import ViewerState
from transformer_viewer.viewer.status import StatusBar
from transformer_viewer.viewer.widgets.attention_panel import AttentionPanel
from transformer_viewer.viewer.widgets.head_grid import HeadGridView
from transformer_viewer.viewer.widgets.logits_panel import LogitsPanel
from transformer_viewer.viewer.widgets.mask_grid import MaskGrid
from transformer_viewer.viewer.widgets.prompt_editor import PromptEditor
from transformer_viewer.viewer.widgets.token_strip import TokenStrip
from transformer_viewer.viewer.worker import WorkerClient

DEFAULT_SIZE = (1440, 900)
TOP_K = 10


class MainWindow(QMainWindow):
    """`idle` fires whenever the worker has answered everything asked (screenshots wait for it)."""

    idle = Signal()

    def __init__(self, settings: QSettings | None = None, debounce_ms: int | None = None,
                 worker: WorkerClient | None = None):
        """`worker`: a client already started (and asked to probe/load) to save startup time."""
        super().__init__()
        collect_on_gui_thread()  # before the worker thread exists: it must never run the collector
        self.setWindowTitle("transformer-viewer")
        self.setObjectName("MainWindow")
        self.settings = settings if settings is not None else QSettings("transformer-viewer", "transformer-viewer")
        self.state = ViewerState(self)
        own_worker = worker is None
        self.worker = WorkerClient(self) if own_worker else worker
        if not own_worker:
            self.worker.setParent(self)
        self.last_error: str | None = None  # the last one-line error shown (tests read it)
        self.device_choice = "auto"
        self.cuda_available = False
        self._error_box: QMessageBox | None = None
        self._shown_head = (0, 0)
        self._shown_attention = None  # the attention array the heatmap and grid were drawn from
        self._requested_position: int | None = None
        self._build_views(debounce_ms)
        self.status = StatusBar(self)
        self.setStatusBar(self.status)
        self.actions_ = window_actions.install(self)
        self.setAcceptDrops(True)
        self.resize(*DEFAULT_SIZE)
        self._connect()
        if own_worker:
            self.worker.submit(ProbeRequest())

    # -- layout ---------------------------------------------------------------------------
    def _build_views(self, debounce_ms) -> None:
        st = self.state
        self.prompt_editor = PromptEditor(debounce_ms=debounce_ms) if debounce_ms is not None else PromptEditor()
        self.token_strip = TokenStrip(st)
        self.attention = AttentionPanel()
        self.head_grid = HeadGridView()
        self.logits = LogitsPanel(st)
        self.mask_grid = MaskGrid(st)
        top = QSplitter(Qt.Vertical)
        top.setChildrenCollapsible(False)
        top.addWidget(self.prompt_editor)
        top.addWidget(self.token_strip)
        top.setSizes([80, 190])
        self.docks: dict[str, QDockWidget] = {}
        self.add_view_dock("Prompt and tokens", top, Qt.TopDockWidgetArea)
        self.add_view_dock("All heads", self.head_grid, Qt.LeftDockWidgetArea)
        self.add_view_dock("Head mask", self.mask_grid, Qt.LeftDockWidgetArea)
        self.add_view_dock("Next token", self.logits, Qt.RightDockWidgetArea)
        # The middle is a tab widget: big views can live beside the attention heatmap
        # (`add_view_tab`); its tab bar shows only once there is a second tab.
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.setTabBarAutoHide(True)
        page = QWidget()
        lay = QVBoxLayout(page)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addWidget(self.attention)
        self.tabs.addTab(page, "Attention")
        self.setCentralWidget(self.tabs)
        # Side columns run the full height; a bottom dock sits under the middle only.
        self.setCorner(Qt.BottomLeftCorner, Qt.LeftDockWidgetArea)
        self.setCorner(Qt.BottomRightCorner, Qt.RightDockWidgetArea)
        self._sized = False
        self.apply_default_sizes()
        self.prompt_editor.edit.setFocus()

    def add_view_dock(self, title: str, widget: QWidget, area=Qt.BottomDockWidgetArea,
                      tabify_with: str | None = None) -> QDockWidget:
        """Put `widget` in a dock named `title` (listed in View); tabbed onto `tabify_with` if given."""
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock:{title}")
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetFloatable | QDockWidget.DockWidgetClosable)
        self.addDockWidget(area, dock)
        if tabify_with in self.docks:
            self.tabifyDockWidget(self.docks[tabify_with], dock)
        self.docks[title] = dock
        if hasattr(self, "actions_"):
            self.actions_.view_menu_add(dock)
        return dock

    def apply_default_sizes(self) -> None:
        """Both grids are layers x heads, so they share the left column; the heatmap gets the middle."""
        d = self.docks
        self.resizeDocks([d["All heads"], d["Next token"]], [360, 400], Qt.Horizontal)
        # With views docked below the heatmap too, the tokens get fewer lines so it keeps some room.
        below = any(self.dockWidgetArea(w) == Qt.BottomDockWidgetArea and not w.isHidden() for w in d.values())
        self.resizeDocks([d["Prompt and tokens"]], [150 if below else 250], Qt.Vertical)
        self.resizeDocks([d["All heads"], d["Head mask"]], [330, 240], Qt.Vertical)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        if not self._sized:  # docks added after __init__ (extensions) re-flow the layout once
            self._sized = True
            QTimer.singleShot(0, self.apply_default_sizes)

    def add_view_tab(self, title: str, widget: QWidget) -> int:
        """Put a large view in a tab beside the attention heatmap; returns the tab's index."""
        return self.tabs.addTab(widget, title)

    def _connect(self) -> None:
        st, w = self.state, self.worker
        self.prompt_editor.run_requested.connect(self.run_prompt)
        st.prompt_changed.connect(lambda text: self.prompt_editor.set_text(text, run=False))
        st.mask_changed.connect(self._on_mask)
        st.selection_changed.connect(self._on_selection)
        st.trace_changed.connect(self._on_trace)
        self.attention.cell_clicked.connect(lambda row, _col: st.set_selection(query=row))
        self.head_grid.head_activated.connect(lambda layer, head: st.set_selection(layer=layer, head=head))
        w.result.connect(self._on_result)
        w.failed.connect(self._on_failure)
        w.progress.connect(self.status.show_progress)
        w.busy_changed.connect(self._on_busy)

    # -- commands -------------------------------------------------------------------------
    def load(self, path: str | None, device: str | None = None, n_head: int | None = None) -> None:
        """Load a checkpoint on the worker (None: the bundled model); the old one stays until it works."""
        if device is not None:
            self.device_choice = device
        self.worker.submit(LoadRequest(path=path, device=self.device_choice, n_head=n_head))

    def set_device(self, device: str) -> None:
        self.device_choice = device
        if self.state.model_info is not None:
            self.worker.submit(DeviceRequest(device=device))

    def run_prompt(self, text: str) -> None:
        """Run `text` now (the editor calls this debounced; Ctrl+Enter at once)."""
        self.state.set_prompt(text)
        self.prompt_editor.set_text(text, run=False)
        self.request_trace()

    def request_trace(self) -> None:
        st = self.state
        if st.model_info is None:
            return
        if not st.prompt:
            self.prompt_editor.show_notice("Type a prompt to run the model.", warning=False)
            return
        self._requested_position = st.query
        self.worker.submit(self._run_request(TraceRequest))

    def _run_request(self, request_type: type[TraceRequest]) -> TraceRequest:
        """A run of the prompt, mask and position as they are now (a trace, or a prediction)."""
        st = self.state
        return request_type(text=st.prompt, mask=np.array(st.mask), ablation=st.ablation, position=st.query,
                            top_k=TOP_K)

    # -- state -> worker / views ----------------------------------------------------------
    def _on_mask(self, mask) -> None:
        if self.head_grid.mask().shape == mask.shape:
            self.head_grid.set_mask(mask)
        if preview.worth_asking(self.state):
            self.worker.submit(self._run_request(PredictRequest))
        self.request_trace()

    def _on_selection(self) -> None:
        st = self.state
        self.head_grid.set_selected(st.layer, st.head)
        if (st.layer, st.head) != self._shown_head:
            self._shown_head = (st.layer, st.head)
            self.attention.set_trace(st.trace, st.layer, st.head, st.query_index)
        else:
            self.attention.set_query(st.query_index)
        if st.trace is not None and st.query != self._requested_position:
            self.request_trace()  # the prediction follows the selected token

    def _on_trace(self, trace) -> None:
        st = self.state
        if trace is None:
            return
        if trace.attention is self._shown_attention and (st.layer, st.head) == self._shown_head:
            # Only the prediction position moved (the handler shares the arrays): no redraw.
            self.attention.set_query(st.query_index)
        else:
            self._shown_head = (st.layer, st.head)
            self._shown_attention = trace.attention
            self.attention.set_trace(trace, st.layer, st.head, st.query_index)
            # The trace's own mask always matches its patterns, even when a newly loaded model
            # has already reshaped the state's mask.
            self.head_grid.set_patterns(trace.attention, trace.mask)
            self.head_grid.set_selected(st.layer, st.head)
        self.prompt_editor.show_trace(trace, st.model_info.block_size if st.model_info else 0)

    # -- worker answers -------------------------------------------------------------------
    def _on_result(self, result) -> None:
        request, value = result.request, result.value
        if isinstance(value, ProbeResult):
            self.cuda_available = value.cuda_available
            self.actions_.set_cuda(value.cuda_available, value.cuda_name)
        elif isinstance(value, LoadResult):
            self.state.set_model(value.info)
            self.status.clearMessage()
            self.status.show_model(value.info)
            self.actions_.set_device_checked(value.info.device)
            if isinstance(request, LoadRequest) and request.path is not None:
                self.actions_.add_recent(request.path)
            if value.warning:
                self.status.showMessage(value.warning, 10000)
            self.setWindowTitle(f"{value.info.name} \u2014 transformer-viewer")
            self.request_trace()
        elif isinstance(value, PredictResult):
            preview.show_if_current(self, request, value)
        elif isinstance(value, TraceResult):
            self.state.set_traces(value.trace, value.clean)
            info = self.state.model_info
            self.status.show_forward(value.forward_ms, value.trace.first_layer_run, info.n_layer if info else 0,
                                     compute_ms=value.compute_ms)

    def _on_failure(self, failure) -> None:
        if failure.cancelled:
            self.status.showMessage("cancelled", 3000)
            return
        request = failure.request
        if isinstance(request, TraceRequest):
            self.prompt_editor.show_notice(failure.message)
            self.status.showMessage(failure.message, 8000)
            self.last_error = failure.message
        elif isinstance(request, LoadRequest) and request.path is None and self.state.model_info is None:
            self.status.showMessage(failure.message)  # no bundled model yet: not worth a dialog
            self.prompt_editor.show_notice(failure.message)
            self.last_error = failure.message
        else:
            if isinstance(request, DeviceRequest) and self.state.model_info is not None:
                self.actions_.set_device_checked(self.state.model_info.device)
            self.show_error(failure.message)

    def _on_busy(self, busy: bool) -> None:
        self.status.set_busy(busy)
        if not busy:
            QTimer.singleShot(0, self._emit_idle)

    def _emit_idle(self) -> None:
        if not self.worker.busy:
            self.idle.emit()

    def show_error(self, message: str, title: str = "transformer-viewer") -> None:
        """A one-line error in a window-modal box that does not block the event loop."""
        self.last_error = message
        self.status.showMessage(message, 10000)
        if self._error_box is None:
            self._error_box = QMessageBox(QMessageBox.Warning, title, "", QMessageBox.Ok, self)
        self._error_box.setWindowTitle(title)
        self._error_box.setText(message)
        self._error_box.open()

    # -- drag and drop --------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:  # noqa: N802 - Qt name
        if window_actions.dropped_path(event.mimeData()) is not None:
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802
        path = window_actions.dropped_path(event.mimeData())
        if path is not None:
            event.acceptProposedAction()
            self.load(window_actions.checkpoint_target(path))

    def closeEvent(self, event) -> None:  # noqa: N802
        self.prompt_editor.timer.stop()
        self.worker.close()
        super().closeEvent(event)
