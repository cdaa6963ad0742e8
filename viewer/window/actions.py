"""The main window's menus: File (open, recent, export), Device, View, Examples, Help, and the
keyboard navigation of layers and heads. `export(window, view_id, path)` is the dialog-free core
of every export of the window (File > Export and each view's own Export button), used by tests
and the monkey test."""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QFileDialog, QInputDialog

from transformer_viewer.viewer.window import help_menu

CHECKPOINT_FILTER = ("Checkpoints (*.safetensors *.pt *.pth *.ckpt *.bin config.json);;"
                     "Hugging Face model folder: pick its config.json (config.json);;All files (*)")
NO_CUDA_TIP = "no CUDA device is available on this machine (or this torch build has no CUDA)"


def checkpoint_target(path: str) -> str:
    """A picked `config.json` stands for its Hugging Face folder."""
    return os.path.dirname(path) if os.path.basename(path) == "config.json" else path


def dropped_path(mime) -> str | None:
    for url in mime.urls() if mime.hasUrls() else []:
        if url.isLocalFile():
            return url.toLocalFile()
    return None


class WindowActions:
    def __init__(self, window):
        self.w = window
        bar = window.menuBar()
        self.file_menu = bar.addMenu("&File")
        self.device_menu = bar.addMenu("&Device")
        self.view_menu = bar.addMenu("&View")
        self.examples_menu = bar.addMenu("&Examples")
        self._build_file()
        self._build_device()
        self._build_view()
        self._build_examples()
        self.help = help_menu.install(window)  # Help: keyboard shortcuts, About
        for view_id, view in window.views.items():  # each view's Export button: the same dialog and manifest
            button = getattr(view, "export_button", None)
            if button is not None:
                button.exporter = lambda ext, v=view_id: self.export_dialog(v, ext)

    # -- File -----------------------------------------------------------------------------
    def _build_file(self) -> None:
        m, w = self.file_menu, self.w
        self._action(m, "&Open checkpoint…", self.open_dialog, QKeySequence.Open,
                     "a .safetensors, nanoGPT .pt, state-dict .pt/.pth file, or a Hugging Face folder's config.json")
        self._action(m, "Open Hugging Face &folder…", self.open_folder_dialog, tip="a folder with config.json and weights")
        self._action(m, "Open a cached model by &name…", self.open_name_dialog,
                     tip="a Hugging Face model already in the local cache, e.g. gpt2 (nothing is downloaded)")
        self._action(m, "Open the &bundled model", lambda: w.load(None))
        self._action(m, "Open prompt &pairs…", self.open_pairs_dialog,
                     tip="a text file of clean and corrupted prompts, one pair a line, tab-separated: the "
                         "patching view averages its results over them")
        self.recent_menu = m.addMenu("&Recent checkpoints")
        self._rebuild_recent()
        m.addSeparator()
        w.sessions.build_menu(m, self._action)
        m.addSeparator()
        ex = self.export_menu = m.addMenu("&Export")
        self._action(ex, "Heatmap as &PNG…", lambda: self.export_dialog("heatmap", ".png"))
        self._action(ex, "Heatmap as &SVG…", lambda: self.export_dialog("heatmap", ".svg"))
        self._action(ex, "Heatmap as P&DF…", lambda: self.export_dialog("heatmap", ".pdf"))
        self._action(ex, "All heads grid as P&NG…", lambda: self.export_dialog("grid", ".png"))
        self._action(ex, "All heads grid as S&VG…", lambda: self.export_dialog("grid", ".svg"))
        self._action(ex, "&All heads grid as PDF…", lambda: self.export_dialog("grid", ".pdf"))
        self._action(ex, "Displayed matrix as .&npy…", lambda: self.export_dialog("heatmap", ".npy"))
        self._action(ex, "Displayed matrix as .&csv…", lambda: self.export_dialog("heatmap", ".csv"))
        self._action(ex, "Current head's &full pattern as .npy…", self.export_pattern_dialog,
                     tip="the selected head's whole pattern at full resolution, at any prompt length")
        m.addSeparator()
        self._action(m, "&Quit", w.close, QKeySequence.Quit)

    def _action(self, menu, text, slot, shortcut=None, tip="") -> QAction:
        a = QAction(text, self.w)
        if shortcut is not None:
            a.setShortcut(shortcut)
        if tip:
            a.setToolTip(tip)
            a.setStatusTip(tip)
        a.triggered.connect(lambda _checked=False: slot())
        menu.addAction(a)
        return a

    def open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w, "Open checkpoint", self._last_dir(), CHECKPOINT_FILTER)
        if path:
            self.w.load(checkpoint_target(path))

    def open_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self.w, "Open Hugging Face model folder", self._last_dir())
        if path:
            self.w.load(path)

    def open_name_dialog(self) -> None:
        name, ok = QInputDialog.getText(self.w, "Open cached model", "Hugging Face model name (from the local cache):",
                                        text="gpt2")
        if ok and name.strip():
            self.w.load(name.strip())

    def open_pairs_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w, "Open prompt pairs", self._last_dir(),
                                              "Prompt pairs, tab-separated (*.tsv *.txt);;All files (*)")
        if path:
            self.open_pairs(path)

    def open_pairs(self, path: str) -> bool:
        """Patch over the pairs in `path` (averaged) in the patching view; a bad file: one line."""
        from transformer_viewer.model.analysis.patching.pairs import read_pairs
        from transformer_viewer.model.errors import ModelError

        try:
            pairs = read_pairs(path)
        except (ModelError, OSError) as e:
            self.w.show_error(str(e).splitlines()[0] if str(e) else type(e).__name__)
            return False
        st = self.w.state
        st.set_patching(comparing=True, pairs=tuple(pairs), pairs_name=os.path.basename(path))
        self.w.prompt_editor.set_text(pairs[0][0])  # the strips show the first pair
        self.w.views["corrupted-prompt"].set_text(pairs[0][1])
        self.w.show_view("patching")
        return True

    def _last_dir(self) -> str:
        recent = self.recent()
        return os.path.dirname(recent[0]) if recent else os.getcwd()

    def recent(self) -> list[str]:
        return self.w.app_settings.recent()

    def add_recent(self, path: str) -> None:
        # A file or folder by its full path; a cached model's name (`org/name`) as it is.
        path = os.path.abspath(path) if os.path.exists(path) else path
        items = [path] + [p for p in self.recent() if p != path]
        self.w.app_settings.set_recent(items)
        self._rebuild_recent()

    def _rebuild_recent(self) -> None:
        menu = self.recent_menu
        menu.clear()
        items = self.recent()
        for i, path in enumerate(items):
            a = menu.addAction(f"&{i + 1}  {os.path.basename(path) or path}")
            a.setToolTip(path)
            a.setStatusTip(path)
            a.triggered.connect(lambda _c=False, p=path: self.w.load(p))
        if items:
            menu.addSeparator()
            menu.addAction("Clear list", self._clear_recent)
        else:
            menu.addAction("(none yet)").setEnabled(False)

    def _clear_recent(self) -> None:
        self.w.app_settings.set_recent([])
        self._rebuild_recent()

    def export_dialog(self, what: str, ext: str) -> None:
        """Ask the export's options, then the file, and export the view `what` (a view id, or
        "heatmap" for the attention view) to it."""
        from dataclasses import replace

        from transformer_viewer.viewer.views.export_options import ask_figure_options
        from transformer_viewer.viewer.window.figure_records import no_manifest, regeneration_notes

        view_id = "attention" if what == "heatmap" else what
        view = self.w.views[view_id]
        folder = self.w.app_settings.export_dir()  # read (and a bad setting noted) whatever the answer
        target = view.export_target() if hasattr(view, "export_target") else view
        options = ask_figure_options(self.w, ext, (target.width(), target.height()), self.w.figure_options,
                                     no_manifest=(why := no_manifest(view_id, self.w.state)),
                                     notes=regeneration_notes(view_id, view))
        if options is None:
            return
        start = self.w.figure_options
        self.w.figure_options = options if not why else replace(  # the boxes it had to turn off
            options, manifest=start.manifest, embed=start.embed, private=start.private)
        st = self.w.state
        button = getattr(view, "export_button", None)
        name = (f"attention_L{st.layer}H{st.head}" if view_id == "attention" else "all_heads" if view_id == "grid"
                else button.name if button is not None else view_id) + ext
        filters = {".png": "PNG image (*.png)", ".svg": "SVG image (*.svg)", ".pdf": "PDF document (*.pdf)",
                   ".npy": "NumPy array (*.npy)",
                   ".csv": "CSV table (*.csv)"}
        path, _ = QFileDialog.getSaveFileName(self.w, "Export", os.path.join(folder, name), filters[ext])
        if path:
            if export(self.w, view_id, path, options.scale, theme=options.theme, manifest=options.manifest,
                      private=options.private, embed=options.embed) is not None:
                self.w.app_settings.set_export_dir(os.path.dirname(os.path.abspath(path)))

    def export_pattern_dialog(self) -> None:
        from transformer_viewer.viewer.window.pattern_export import export_pattern

        st = self.w.state
        folder = self.w.app_settings.export_dir()
        name = os.path.join(folder, f"pattern_L{st.layer}H{st.head}.npy")
        path, _ = QFileDialog.getSaveFileName(self.w, "Export the head's full pattern", name,
                                              "NumPy array (*.npy);;CSV table (*.csv)")
        if path and export_pattern(self.w, path) is not None:
            self.w.app_settings.set_export_dir(os.path.dirname(os.path.abspath(path)))

    # -- Device ---------------------------------------------------------------------------
    def _build_device(self) -> None:
        m = self.device_menu
        m.setToolTipsVisible(True)
        group = QActionGroup(self.w)
        group.setExclusive(True)
        self.cpu_action = QAction("&CPU", self.w, checkable=True)
        self.cuda_action = QAction("C&UDA", self.w, checkable=True)
        self.cuda_action.setEnabled(False)
        self.cuda_action.setToolTip("checking for a CUDA device…")
        for a, device in ((self.cpu_action, "cpu"), (self.cuda_action, "cuda")):
            group.addAction(a)
            m.addAction(a)
            a.triggered.connect(lambda _c=False, d=device: self.w.set_device(d))
        self.cpu_action.setChecked(True)

    def set_cuda(self, available: bool, name: str = "") -> None:
        self.cuda_action.setEnabled(available)
        self.cuda_action.setToolTip(f"run on {name}" if available else NO_CUDA_TIP)
        self.cuda_action.setStatusTip(self.cuda_action.toolTip())

    def set_device_checked(self, device: str) -> None:
        (self.cuda_action if device.startswith("cuda") else self.cpu_action).setChecked(True)

    # -- View -----------------------------------------------------------------------------
    def _build_view(self) -> None:
        m = self.view_menu
        self._dock_anchor = m.addSeparator()
        for dock in self.w.docks.values():
            self.view_menu_add(dock)
        nav = m.addMenu("&Select")
        st = self.w.state
        moves = [
            ("Previous head", ("Left",), lambda: st.set_selection(head=st.head - 1)),
            ("Next head", ("Right",), lambda: st.set_selection(head=st.head + 1)),
            ("Previous layer", ("Up", "PgUp"), lambda: st.set_selection(layer=st.layer - 1)),
            ("Next layer", ("Down", "PgDown"), lambda: st.set_selection(layer=st.layer + 1)),
            ("Previous token as query", ("Alt+Left",), lambda: self._move_query(-1)),
            ("Next token as query", ("Alt+Right",), lambda: self._move_query(+1)),
            ("Last token as query", ("Alt+End",), lambda: st.set_selection(clear_query=True)),
        ]
        self.nav_actions = []
        for text, keys, slot in moves:
            a = self._action(nav, text, slot)
            a.setShortcuts([QKeySequence(k) for k in keys])
            a.setShortcutContext(Qt.WindowShortcut)
            self.w.addAction(a)  # works with the menu bar hidden too
            self.nav_actions.append(a)
        m.addSeparator()
        self.compare_action = self._action(m, "&Compare with a corrupted prompt", self.toggle_compare,
                                           tip="a second prompt box for activation patching: which components "
                                               "carry the difference between the two prompts")
        self.compare_action.setCheckable(True)
        st.patching_changed.connect(lambda: self.compare_action.setChecked(st.patching.comparing))
        self._action(m, "Reset &layout", self.reset_layout, tip="show every dock again at its default size")
        self._action(m, "Reset heatmap zoom", lambda: self.w.attention.heatmap.reset_view(), QKeySequence("Ctrl+0"))

    def toggle_compare(self) -> None:
        st = self.w.state
        st.set_patching(comparing=self.compare_action.isChecked())
        if st.patching.comparing:
            self.w.views["corrupted-prompt"].edit.setFocus()
            self.w.show_view("patching")

    def reset_layout(self) -> None:
        for dock in self.w.docks.values():
            dock.setFloating(False)
            dock.show()
        self.w.apply_default_sizes()

    def view_menu_add(self, dock) -> None:
        self.view_menu.insertAction(self._dock_anchor, dock.toggleViewAction())

    def _patching_example(self, prompt) -> None:
        st = self.w.state
        st.set_patching(comparing=True, pairs=(), pairs_name="", metric="logit-diff", what="heads", position=None,
                        direction="denoise", tokens=_example_tokens(st, prompt.tokens))
        self.w.views["corrupted-prompt"].set_text(prompt.corrupted)
        self.w.show_view("patching")

    def _move_query(self, step: int) -> None:
        st = self.w.state
        q = st.query_index
        if q is not None:
            st.set_selection(query=max(0, q + step))

    # -- Examples -------------------------------------------------------------------------
    def _build_examples(self) -> None:
        m = self.examples_menu
        m.setToolTipsVisible(True)
        for p in example_prompts():
            a = m.addAction(p.title)
            a.setToolTip(p.shows)
            a.triggered.connect(lambda _c=False, p=p: self._run_example(p))
        if not m.actions():
            m.menuAction().setVisible(False)


    def _run_example(self, prompt) -> None:
        """Run an example; on the bundled model (the one the examples were written for) also
        show the head that the example is about. A patching example also sets the corrupted
        prompt and the tokens of its logit difference, and shows the patching view."""
        from transformer_viewer.model.checkpoints.bundled import is_bundled

        self.w.prompt_editor.set_text(prompt.text)  # runs it, and replaces any edit not yet run
        if prompt.corrupted:
            self._patching_example(prompt)
        info = self.w.state.model_info
        if prompt.head is not None and info is not None and is_bundled(info.source):
            layer, head = prompt.head
            if layer < info.n_layer and head < info.n_head:
                self.w.state.set_selection(layer=layer, head=head)


def _example_tokens(state, texts) -> tuple[int, ...]:
    """The ids of an example's tokens in the loaded model's tokenizer (() where one is not one token)."""
    from transformer_viewer.model.errors import ModelError
    from transformer_viewer.model.tokenizers.tokenizer import parse_token

    if state.model_info is None:
        return ()
    tok = state.tokenizer()
    try:
        return tuple(parse_token(t, tok, tok.n_vocab, "token") for t in texts)
    except ModelError:
        return ()


def example_prompts() -> tuple:
    try:
        from transformer_viewer.model.capture.prompts import example_prompts as load
        return load()
    except Exception:  # noqa: BLE001 - the examples are a convenience; a broken file must not stop the app
        return ()


def default_head() -> tuple[int, int] | None:
    """The head the first example is about (on the bundled model), shown at start."""
    prompts = example_prompts()
    return prompts[0].head if prompts else None


def default_prompt() -> str:
    prompts = example_prompts()
    return prompts[0].text if prompts else "When Mary and John went to the store, John gave a drink to"


def export(window, what: str, path: str, scale: float = 1.0, theme: str = "light", manifest: bool = False,
           private: bool = False, embed: bool = False) -> str | None:
    """Export the window's view `what` (a registry view id; "heatmap" is the attention view) to
    `path` by its extension: .png/.svg/.pdf a figure in `theme` titled with the model, the view
    and the mask, laid out at the view's on-screen size (a PNG at `scale` pixels per logical
    pixel); .npy/.csv the matrix it draws. With `manifest`, FILE.manifest.json beside it, with
    `embed` the manifest in the SVG's or PDF's metadata (`private`: without the prompt and local
    paths). Returns the path written, or None after showing the one-line error."""
    from dataclasses import replace

    from transformer_viewer.model.errors import ModelError
    from transformer_viewer.viewer.export import export_view, extension
    from transformer_viewer.viewer.export_layout import layout_size
    from transformer_viewer.viewer.figure import FigureStyle, view_title
    from transformer_viewer.viewer.views.registry import entry
    from transformer_viewer.viewer.window.figure_records import (
        FIGURE_FORMATS,
        embedded_manifest,
        record_export,
        regenerable,
    )

    view_id = "attention" if what == "heatmap" else what
    try:
        if window.state.trace is None:
            raise ModelError("nothing to export yet: load a model and run a prompt first")
        view, ext = window.views[view_id], extension(path)
        if view_id == "grid" and ext in (".npy", ".csv"):
            raise ModelError("the heads grid exports as .png, .svg or .pdf; export one head's matrix from the heatmap")
        if view_id not in ("attention", "grid") and hasattr(view, "matrix") and view.matrix().size == 0:
            raise ModelError("nothing to export yet: this view has drawn nothing; show it (start a scan) first")
        notes = tuple(view.figure_notes()) if hasattr(view, "figure_notes") else ()
        style = FigureStyle(theme=theme, title=view_title(window.state, entry(view_id).title, view), notes=notes)
        size = None
        if ext in FIGURE_FORMATS:
            catch_up = getattr(view, "catch_up", None)
            if catch_up is not None:  # a view hidden in the window draws what it skipped, before it is measured
                catch_up()
            size = layout_size(view, style)  # the whole figure at the view's on-screen size: the manifest says it
            if embed and ext != ".png" and regenerable(view_id, window.state):
                style = replace(style, manifest=embedded_manifest(window, view_id, view, path, scale, theme, size,
                                                                  private))
        written = export_view(view, path, scale=scale if ext == ".png" else 1.0, size=size, style=style)
        record_export(window, view_id, view, written, scale, theme, size, manifest, private,
                      embed=embed and ext in (".svg", ".pdf"))
    except (ModelError, OSError) as e:
        window.show_error(str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None
    window.status.showMessage(f"exported {written}", 5000)
    return written


def install(window) -> WindowActions:
    return WindowActions(window)
