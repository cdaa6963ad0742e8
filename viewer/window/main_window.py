"""The main window: one ViewerState, one worker thread, and the views of the registry between them.

Data flow: the prompt editor, mask grid and token strip change `state`; the run controller
(viewer/controller.py) turns every change that needs the model into requests for the worker
(newest wins, stale answers dropped) and installs their answers with `state.set_traces`, and
every view redraws from the state's signals. The window shows what the controller reports
(timings, notices, the quick prediction of a head toggle) and owns loading and devices. Views are built and placed from
`views/registry.py`: a view that asks the worker for its own computation gets its answers
through the handle its `submit` returns, not through the window.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QTabBar,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from transformer_viewer.viewer.controller import RunController
from transformer_viewer.viewer.gc_guard import collect_after_load, collect_on_gui_thread
from transformer_viewer.viewer.state import ViewerState
from transformer_viewer.viewer.views.export_options import FigureOptions
from transformer_viewer.viewer.views.prompt_editor import PromptEditor
from transformer_viewer.viewer.views.registry import VIEWS
from transformer_viewer.viewer.window import actions as window_actions
from transformer_viewer.viewer.window import sae_menu
from transformer_viewer.viewer.window.empty_states import EmptyStates
from transformer_viewer.viewer.window.session_actions import SessionActions
from transformer_viewer.viewer.window.settings import NOTE_MS, SettingsReader
from transformer_viewer.viewer.window.status_bar import StatusBar
from transformer_viewer.viewer.worker.client import RequestHandle, WorkerClient
from transformer_viewer.viewer.worker.requests import (
    DeviceRequest,
    LoadRequest,
    ProbeRequest,
)

DEFAULT_SIZE = (1440, 900)
DOCK_SEPARATOR = 8  # px between docks and the middle, with some slack for the style's margins


class MainWindow(QMainWindow):
    """`idle` fires whenever the worker has answered everything asked (screenshots wait for it)."""

    idle = Signal()

    def __init__(self, settings: QSettings | None = None, debounce_ms: int | None = None,
                 worker: WorkerClient | None = None, pending: Iterable[RequestHandle] = ()):
        """`worker`: a client already started to save startup time; `pending`: the handles of
        what it was asked before the window existed (probe, load), whose answers come here."""
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
        self.cuda_name = ""  # the CUDA device the worker found, for Help > About
        self._error_box: QMessageBox | None = None
        self._build_views(debounce_ms)
        self.controller = RunController(self.state, self.worker, self, hold_prompt=self.prompt_editor.editing)
        self.status = StatusBar(self)
        self.setStatusBar(self.status)
        self.app_settings = SettingsReader(self.settings, note=lambda line: self.status.showMessage(line, NOTE_MS))
        self.figure_options = FigureOptions()  # what File > Export last chose (a session keeps it)
        self.exported_figures: list = []  # FigureRecords of what was exported from this window
        self.sessions = SessionActions(self)  # before the menus: File lists its actions
        self.actions_ = window_actions.install(self)
        self.sae_menu = sae_menu.install(self)  # File > Open SAE…; the SAEs a load lets go
        self.setAcceptDrops(True)
        self.resize(*DEFAULT_SIZE)
        self._connect()
        self.empty_states = EmptyStates(self)  # plain messages over the plots until there is data
        for handle in pending:
            self._watch(handle)
        if own_worker:
            self._watch(self.worker.submit(ProbeRequest()))

    # -- layout ---------------------------------------------------------------------------
    def _build_views(self, debounce_ms) -> None:
        st = self.state
        self.prompt_editor = PromptEditor(debounce_ms=debounce_ms) if debounce_ms is not None else PromptEditor()
        self.docks: dict[str, QDockWidget] = {}  # by view id; "prompt": the prompt editor and tokens
        # The middle is a tab widget: the big views live beside the attention heatmap; its tab
        # bar shows only once there is a second tab.
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.setTabBarAutoHide(True)
        # Tabs a little narrower than the style's own, so that every tab's title shows at the
        # default size beside the side columns.
        self.tabs.tabBar().setStyleSheet("QTabBar::tab { padding: 4px 8px; }")
        self.setCentralWidget(self.tabs)
        top = QSplitter(Qt.Vertical)
        top.setChildrenCollapsible(False)
        top.addWidget(self.prompt_editor)
        self.views: dict[str, QWidget] = {}  # by the registry's view id
        for entry in VIEWS:
            view = self.views[entry.id] = entry.build(st, self.worker)
            self._place(entry, view, top)
        top.setSizes([80, 190])
        self.add_view_dock("prompt", "Prompt and tokens", top, Qt.TopDockWidgetArea)
        self.token_strip = self.views["tokens"]
        self.attention = self.views["attention"]
        self.head_grid = self.views["grid"]
        self.mask_grid = self.views["head-mask"]
        self.logits = self.views["next-token"]
        # Side columns run the full height; a bottom dock sits under the middle only.
        self.setCorner(Qt.BottomLeftCorner, Qt.LeftDockWidgetArea)
        self.setCorner(Qt.BottomRightCorner, Qt.RightDockWidgetArea)
        self._sized = False
        self.apply_default_sizes()
        self.prompt_editor.edit.setFocus()

    def _place(self, entry, view: QWidget, top: QSplitter) -> None:
        if entry.place == "top":
            top.addWidget(view)
        elif entry.place == "center":
            page = QWidget()
            lay = QVBoxLayout(page)
            lay.setContentsMargins(2, 2, 2, 2)
            lay.addWidget(view)
            self.tabs.insertTab(0, page, entry.title)
            self.tabs.setCurrentIndex(0)
        elif entry.place == "tab":
            self.tabs.addTab(view, entry.title)
        elif entry.place in ("left", "right"):
            self.add_view_dock(entry.id, entry.title, view, Qt.LeftDockWidgetArea if entry.place == "left" else Qt.RightDockWidgetArea)
        elif entry.place == "right-below":
            # Under the right column's first view (Continue sits under Next token).
            above = next(d for d in self.docks.values() if self.dockWidgetArea(d) == Qt.RightDockWidgetArea)
            dock = self.add_view_dock(entry.id, entry.title, view, Qt.RightDockWidgetArea)
            self.splitDockWidget(above, dock, Qt.Vertical)
            # At the height it asks for (Continue: its controls alone; the features panel: a list).
            QTimer.singleShot(0, lambda: self.resizeDocks([dock], [max(dock.minimumSizeHint().height(),
                                                                      view.sizeHint().height())], Qt.Vertical))
        elif entry.place == "tab-on-demand":
            self._add_on_demand_tab(view, entry.title)
        else:
            raise ValueError(f"view {entry.id!r}: unknown place {entry.place!r}")

    def _add_on_demand_tab(self, view: QWidget, title: str) -> None:
        """A middle tab kept out of the tab bar until `show_view` asks for it (every tab's title
        shows at the default size only without it); its own close button takes it out again."""
        index = self.tabs.addTab(view, title)
        self.tabs.setTabVisible(index, False)
        close = QToolButton()
        close.setAutoRaise(True)
        close.setText("\u00d7")
        close.setToolTip(f"Close the {title} tab (View > {title} brings it back)")
        close.clicked.connect(lambda: self.tabs.setTabVisible(self.tabs.indexOf(view), False))
        self.tabs.tabBar().setTabButton(index, QTabBar.RightSide, close)

    def show_view(self, view_id: str) -> None:
        """Bring the view `view_id` (its registry id) to the front (its tab, or its dock)."""
        view = self.views[view_id]
        page = next((self.tabs.widget(i) for i in range(self.tabs.count())
                     if self.tabs.widget(i) is view or self.tabs.widget(i).isAncestorOf(view)), None)
        if page is not None:  # a tab: the view itself, or the page around the attention panel
            self.tabs.setTabVisible(self.tabs.indexOf(page), True)
            self.tabs.setCurrentWidget(page)
        elif view_id in self.docks:
            self.docks[view_id].show()
            self.docks[view_id].raise_()

    def add_view_dock(self, key: str, title: str, widget: QWidget, area=Qt.BottomDockWidgetArea,
                      tabify_with: str | None = None) -> QDockWidget:
        """Put `widget` in a dock titled `title` (listed in View), kept in `docks` under `key`
        (a view's id); tabbed onto the dock `tabify_with` (a key) if given."""
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock:{key}")
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetFloatable | QDockWidget.DockWidgetClosable)
        self.addDockWidget(area, dock)
        if tabify_with in self.docks:
            self.tabifyDockWidget(self.docks[tabify_with], dock)
        self.docks[key] = dock
        if hasattr(self, "actions_"):
            self.actions_.view_menu_add(dock)
        return dock

    def apply_default_sizes(self) -> None:
        """Both grids are layers x heads, so they share the left column; the heatmap gets the middle."""
        d = self.docks
        self.resizeDocks([d["grid"], d["next-token"]], [360, self._right_column_width(360)], Qt.Horizontal)
        # With views docked below the heatmap too, the tokens get fewer lines so it keeps some room.
        below = any(self.dockWidgetArea(w) == Qt.BottomDockWidgetArea and not w.isHidden() for w in d.values())
        self.resizeDocks([d["prompt"]], [150 if below else 250], Qt.Vertical)
        self.resizeDocks([d["grid"], d["head-mask"]], [330, 240], Qt.Vertical)

    def _right_column_width(self, left: int) -> int:
        """The next-token column's width: 400 px, less what the middle needs to show every tab's
        title (its tab bar scrolls only on a window too small for that), down to 300 px."""
        spare = self.width() - left - self.tabs.tabBar().sizeHint().width() - 3 * DOCK_SEPARATOR
        return max(300, min(400, spare))

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        if not self._sized:  # the docks' final sizes need the shown window
            self._sized = True
            QTimer.singleShot(0, self.apply_default_sizes)

    def _connect(self) -> None:
        st, w = self.state, self.worker
        c = self.controller
        self.prompt_editor.run_requested.connect(self.run_prompt)
        st.prompt_changed.connect(self._on_prompt)
        st.trace_changed.connect(self._on_trace)
        c.traced.connect(self._on_traced)
        c.preview.connect(self.logits.show_preview)
        c.failed.connect(self._on_run_failed)
        c.cancelled.connect(lambda: self.status.showMessage("cancelled", 3000))
        c.needs_prompt.connect(lambda: self.prompt_editor.show_notice("Type a prompt to run the model.", warning=False))
        w.progress.connect(self.status.show_progress)
        w.busy_changed.connect(self._on_busy)

    # -- commands -------------------------------------------------------------------------
    def load(self, path: str | None, device: str | None = None, n_head: int | None = None) -> None:
        """Load a checkpoint on the worker (None: the bundled model); the old one stays until it works."""
        if device is not None:
            self.device_choice = device
        if self.state.model_info is None:
            self.empty_states.set_loading(path)
        self._watch(self.worker.submit(LoadRequest(path=path, device=self.device_choice, n_head=n_head)))

    def set_device(self, device: str) -> None:
        self.device_choice = device
        if self.state.model_info is not None:
            self._watch(self.worker.submit(DeviceRequest(device=device)))

    def run_prompt(self, text: str) -> None:
        """Run `text` now (the editor calls this debounced; Ctrl+Enter at once)."""
        if text != self.state.prompt:
            self.state.set_prompt(text)  # the controller runs it
        else:
            self.controller.run()

    # -- state -> widgets -----------------------------------------------------------------
    def _on_prompt(self, text: str) -> None:
        # A prompt set from elsewhere (a continuation landing as the user types) never replaces
        # keystrokes not yet run (the controller holds it too): they run when the debounce ends.
        if not self.prompt_editor.editing():
            self.prompt_editor.set_text(text, run=False)

    def _on_trace(self, trace) -> None:
        if trace is not None:
            self.prompt_editor.show_trace(trace, self.state.model_info.block_size if self.state.model_info else 0)

    # -- worker answers -------------------------------------------------------------------
    def _watch(self, handle: RequestHandle) -> None:
        """Route the answers of a probe, load or device request to this window."""
        if isinstance(handle.request, ProbeRequest):
            handle.then(on_result=self._on_probed, on_failure=self._on_load_failed)
        else:
            handle.then(on_result=self._on_loaded, on_failure=self._on_load_failed)

    def _on_probed(self, answer) -> None:
        self.cuda_available, self.cuda_name = answer.value.cuda_available, answer.value.cuda_name
        self.actions_.set_cuda(answer.value.cuda_available, answer.value.cuda_name)

    def _on_loaded(self, answer) -> None:
        """A load or a device move finished: the worker holds this model now."""
        request, info = answer.request, answer.value.info
        self.state.set_model(info)
        self.sae_menu.model_loaded(new_session=isinstance(request, LoadRequest))
        collect_after_load()  # what the replaced model left in cycles
        self.status.clearMessage()
        self.status.show_model(info)
        self.actions_.set_device_checked(info.device)
        if isinstance(request, LoadRequest) and request.path is not None:
            self.actions_.add_recent(request.path)
        if answer.value.warning:
            self.status.showMessage(answer.value.warning, 10000)
        self.setWindowTitle(f"{info.name} \u2014 transformer-viewer")
        self.controller.run()

    def _on_load_failed(self, failure) -> None:
        request = failure.request
        if failure.cancelled:
            kept = self.state.model_info
            what = "loading cancelled" if isinstance(request, LoadRequest) else "cancelled"
            self.status.showMessage(f"{what}; {kept.name} is still open" if kept is not None else what, 5000)
        elif isinstance(request, LoadRequest) and request.path is None and self.state.model_info is None:
            self.status.showMessage(failure.message)  # no bundled model yet: not worth a dialog
            self.prompt_editor.show_notice(failure.message)
            self.last_error = failure.message
        else:
            if isinstance(request, DeviceRequest) and self.state.model_info is not None:
                self.actions_.set_device_checked(self.state.model_info.device)
            self.show_error(failure.message)

    def _on_traced(self, value) -> None:
        info = self.state.model_info
        self.status.show_forward(value.forward_ms, value.trace.first_layer_run, info.n_layer if info else 0,
                                 compute_ms=value.compute_ms)

    def _on_run_failed(self, message: str) -> None:
        self.prompt_editor.show_notice(message)
        self.status.showMessage(message, 8000)
        self.last_error = message

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
