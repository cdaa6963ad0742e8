"""File > Save session / Open session / Recent sessions: the window's side of `.tvsession` files.

Opening reads and checks the whole file first (model/sessions/registry.py): a refused file is
one line and the window stays as it was. Then the session's checkpoint opens through the same
load as a path the user types, unless it is the one already open; once it is loaded the rest is
restored through the state (session_binding.py), and the window's usual requests follow. A
checkpoint no longer on this machine is one line that keeps the rest of the session waiting:
it opens on the next checkpoint of the same shape the user picks (the box offers to pick one).
A changed checkpoint (another fingerprint) still opens, with a line saying its numbers may differ.
"""

from __future__ import annotations

import os

from PySide6.QtWidgets import QFileDialog, QMessageBox

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.window import session_binding

SESSION_FILTER = "transformer-viewer sessions (*.tvsession);;All files (*)"
SUFFIX = ".tvsession"


def trace_arrays(trace) -> dict:
    """The run's numbers a session may carry beside its settings (Save session with arrays)."""
    arrays = {"token-ids": trace.token_ids, "next-top-ids": trace.next.top_ids, "next-top-probs": trace.next.top_probs,
              "next-probs": trace.next.probs, "resid-norms": trace.resid_norms, "head-norms": trace.head_norms}
    if trace.token_logprobs is not None:
        arrays["token-logprobs"] = trace.token_logprobs
    return arrays


def surely_missing(source: str | None) -> bool:
    """Whether the checkpoint `source` (None: the bundled model) is a path not on this machine.
    A cached model's name is looked up by the worker's load, which says when it is not cached
    (the cache's reader brings torch, which the GUI thread never imports)."""
    from transformer_viewer.model.checkpoints.bundled import bundled_checkpoint_path

    if source is None:
        return not os.path.exists(bundled_checkpoint_path())
    if os.path.exists(source):
        return False
    return os.path.isabs(source) or source.startswith(".") or source.count("/") > 1 or os.sep != "/" and os.sep in source


class SessionActions:
    def __init__(self, window):
        self.w = window
        self.pending: dict | None = None  # records waiting for their model to load
        self.after_trace: dict | None = None  # records waiting for the restored prompt's trace
        self.notes: list[str] = []  # what the last open noted (tests read it)
        self.path: str | None = None  # the session last saved or opened
        window.state.model_changed.connect(self._on_model)
        window.state.trace_changed.connect(self._on_trace)

    # -- menus ----------------------------------------------------------------------------
    def build_menu(self, menu, action) -> None:
        action(menu, "Open &session…", self.open_dialog, tip="a .tvsession file: its model, prompt, masks and views")
        action(menu, "Save s&ession…", lambda: self.save_dialog(False),
               tip="what the window shows, to reopen it later or elsewhere (a few KB)")
        action(menu, "Save session &with arrays…", lambda: self.save_dialog(True),
               tip="the session plus the run's arrays (next-token distribution, norms); its size is shown first")
        self.recent_menu = menu.addMenu("Recent sess&ions")
        self._rebuild_recent()

    def _rebuild_recent(self) -> None:
        menu = self.recent_menu
        menu.clear()
        items = self.w.app_settings.recent_sessions()
        for i, path in enumerate(items):
            a = menu.addAction(f"&{i + 1}  {os.path.basename(path) or path}")
            a.setToolTip(path)
            a.setStatusTip(path)
            a.triggered.connect(lambda _c=False, p=path: self.open(p))
        if not items:
            menu.addAction("(none yet)").setEnabled(False)

    def _add_recent(self, path: str) -> None:
        path = os.path.abspath(path)
        self.w.app_settings.set_recent_sessions([path] + [p for p in self.w.app_settings.recent_sessions() if p != path])
        self._rebuild_recent()

    def _folder(self) -> str:
        recent = self.w.app_settings.recent_sessions()
        return os.path.dirname(recent[0]) if recent else self.w.app_settings.export_dir()

    # -- save -----------------------------------------------------------------------------
    def save_dialog(self, with_arrays: bool) -> None:
        name = os.path.join(self._folder(), "session" + SUFFIX)
        path, _ = QFileDialog.getSaveFileName(self.w, "Save session", name, SESSION_FILTER)
        if not path:
            return
        if not path.endswith(SUFFIX):
            path += SUFFIX
        if with_arrays:
            size = self.size_with_arrays()
            if size is None:
                return
            asked = QMessageBox.question(self.w, "Save session with arrays",
                                         f"The session with the run's arrays takes {size / 1e6:.1f} MB. Save it?")
            if asked != QMessageBox.StandardButton.Yes:
                return
        self.save(path, with_arrays)

    def size_with_arrays(self) -> int | None:
        from transformer_viewer.model.sessions.registry import saved_size

        if self.w.state.trace is None:
            self.w.show_error("no run to save arrays of yet: run a prompt first, or save the session without arrays")
            return None
        return saved_size(session_binding.capture(self.w), trace_arrays(self.w.state.trace))

    def save(self, path: str, with_arrays: bool = False) -> str | None:
        """Write the session to `path`; returns the path written, or None after the one-line error."""
        from transformer_viewer.model.sessions.registry import save

        arrays = trace_arrays(self.w.state.trace) if with_arrays and self.w.state.trace is not None else None
        try:
            written = save(path, session_binding.capture(self.w), arrays)
        except (OSError, ModelError) as e:
            self.w.show_error(f"{path}: the session could not be saved ({_reason(e)}); choose another folder or name")
            return None
        self.path = written
        self._add_recent(written)
        self.w.status.showMessage(f"saved the session to {written}", 5000)
        return written

    # -- open -----------------------------------------------------------------------------
    def open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w, "Open session", self._folder(), SESSION_FILTER)
        if path:
            self.open(path)

    def open(self, path: str, checkpoint: str | None = None, prompt: str | None = None) -> bool:
        """Open the session at `path` (on `checkpoint` instead of its own, with `prompt` instead of
        its own, when given); False (the window unchanged, one line shown) when refused."""
        from transformer_viewer.model.sessions.registry import load

        try:
            records, _arrays, notes = load(path)
        except ModelError as e:
            self.w.show_error(str(e).splitlines()[0])
            return False
        if prompt is not None:
            from transformer_viewer.model.sessions.prompt_part import PromptRecord

            records["prompt"] = PromptRecord(prompt)
        self.notes = notes
        self.path = os.path.abspath(path)
        self._add_recent(path)
        ckpt = records.get("checkpoint")
        info = self.w.state.model_info
        if checkpoint is not None or (ckpt is None and info is None):
            self.pending = records  # on the checkpoint given, or a session saved before any model: the bundled one
            self.w.load(checkpoint)
        elif ckpt is None or (info is not None and _same_checkpoint(info, ckpt)):
            self._apply(records)
        elif surely_missing(ckpt.source):
            self.pending = records
            self._missing(ckpt)
        else:
            self.pending = records
            self.w.load(ckpt.source)
        self._say_notes()
        return True

    def _on_model(self, info) -> None:
        records, self.pending = self.pending, None
        if records is None or info is None:
            return
        ckpt = records.get("checkpoint")
        if ckpt is None:
            self._apply(records)
            return
        if (info.n_layer, info.n_head) != (ckpt.n_layer, ckpt.n_head):
            self.w.show_error(f"{info.name} has {info.n_layer} layers of {info.n_head} heads, the session's model "
                              f"{ckpt.n_layer} of {ckpt.n_head}; the session was not restored on it: open its checkpoint")
            return
        fp = info.fingerprint
        if fp is not None and ckpt.fingerprint.digest and fp.method == ckpt.fingerprint.method \
                and fp.digest != ckpt.fingerprint.digest:
            self.w.show_error(f"{info.source}: this checkpoint differs from the session's (its fingerprint changed); "
                              "the session is restored on it, but its numbers may differ: open the original with "
                              "File > Open checkpoint")
        self._apply(records)

    def _apply(self, records: dict) -> None:
        from transformer_viewer.model.sessions.environment_part import note_for

        info = self.w.state.model_info
        env = records.get("environment")
        if env is not None and info is not None and info.environment is not None:
            note = note_for(env, info.environment, info.n_embd, info.n_layer)
            if note:
                self.notes.append(note)
        self.after_trace = records
        session_binding.restore(self.w, records, self.notes)
        if self.w.state.trace is not None and self.w.state.trace.text == self.w.state.prompt:
            self._on_trace(self.w.state.trace)
        self._say_notes()

    def _on_trace(self, trace) -> None:
        records = self.after_trace
        prompt = records.get("prompt") if records is not None else None
        if trace is None or records is None or (prompt is not None and trace.text != prompt.text):
            return
        self.after_trace = None
        session_binding.restore_after_trace(self.w, records)

    def _missing(self, ckpt) -> None:
        """One line, and a box that offers to pick the checkpoint; the session waits for it."""
        where = ckpt.source if ckpt.source is not None else "the bundled model"
        line = (f"{where}: the session's checkpoint is not on this machine; the rest of the session is kept and "
                "opens on the checkpoint you pick (File > Open checkpoint)")
        self.w.last_error = line
        self.w.status.showMessage(line, 15000)
        box = self.missing_box = QMessageBox(QMessageBox.Warning, "transformer-viewer", line, QMessageBox.Cancel, self.w)
        pick = box.addButton("Pick checkpoint…", QMessageBox.AcceptRole)
        pick.clicked.connect(self.w.actions_.open_dialog)
        box.open()

    def _say_notes(self) -> None:
        if self.notes:
            self.w.status.showMessage("session: " + self.notes[-1], 15000)


def _same_checkpoint(info, ckpt) -> bool:
    from transformer_viewer.model.checkpoints.bundled import is_bundled

    same_source = is_bundled(info.source) if ckpt.source is None else info.source == ckpt.source
    fp = info.fingerprint
    return same_source and (fp is None or not ckpt.fingerprint.digest or fp.digest == ckpt.fingerprint.digest)


def _reason(e: Exception) -> str:
    """The first line of why a save failed."""
    text = getattr(e, "strerror", None) or (str(e).splitlines() or [type(e).__name__])[0]
    return text[:200]
