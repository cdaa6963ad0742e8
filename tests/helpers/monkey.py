"""A GUI monkey: seeded random actions against a real window (typing, pasting hostile text,
clicking tokens and heads, masks, layer/head/colormap changes, opening bad files, exporting to bad
paths, closing and floating docks, resizing), with what the window said and drew recorded for the
checks at the end."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication

from tests.helpers.hardening import one_line, wait_idle
from tests.helpers.hostile_prompts import HOSTILE_PIECES
from transformer_viewer.viewer.window.actions import export

TYPED = "abcdefghijklmnopqrstuvwxyz ABC 0123456789 .,;:!?'\"()-_/\\@#$%^&*+=<>[]{}|~`"


class Monkey:
    def __init__(self, qtbot, window, rng: random.Random, bad_paths: list[str], good_paths: list[str], out_dir: str):
        self.qtbot, self.w, self.rng = qtbot, window, rng
        self.bad, self.good, self.out = bad_paths, good_paths, out_dir
        self.counts: dict[str, int] = {}
        self.actions = [
            (14, "type", self.type_text), (6, "insert hostile text", self.insert_hostile),
            (5, "delete", self.delete), (4, "ctrl+enter", self.ctrl_enter), (1, "long paste", self.long_paste),
            (2, "example prompt", self.example), (9, "click token", self.click_token),
            (2, "token tooltip", self.token_tooltip), (8, "click mask cell", self.click_mask),
            (2, "right-click mask row", self.right_click_mask), (3, "clear/invert mask", self.mask_button),
            (3, "ablation", self.ablation), (7, "layer/head keys", self.nav), (4, "click head thumbnail", self.click_head),
            (3, "click heatmap cell", self.click_cell), (3, "colormap", self.colormap), (2, "log scale", self.scale),
            (3, "average mode", self.mode), (3, "token colour mode", self.colour_mode), (1, "neuron", self.neuron),
            (3, "hover heatmap", self.hover), (1, "reset zoom", self.reset_zoom),
            (3, "open bad file", self.open_bad), (1, "drop bad file", self.drop_bad), (1, "open dialog", self.open_dialog),
            (0.4, "open good model", self.open_good), (3, "export to bad path", self.export_bad),
            (1, "export", self.export_good), (1, "export menu", self.export_menu),
            (2, "close dock", self.close_dock), (3, "show dock", self.show_dock), (1, "float dock", self.float_dock),
            (1, "resize", self.resize), (1, "device", self.device), (1, "recent", self.recent),
            (1, "cancel", self.cancel), (2, "wait", self.wait),
            (1, "save and reopen session", self.session_round_trip), (1, "open hostile session", self.open_bad_session),
        ]
        self.weights = [a[0] for a in self.actions]

    def step(self) -> str:
        _w, name, fn = self.rng.choices(self.actions, weights=self.weights)[0]
        fn()
        self.counts[name] = self.counts.get(name, 0) + 1
        return name

    def run(self, n_actions: int, settle_every: int, uncaught) -> int:
        """Take `n_actions` random actions, failing at the first that lets an exception escape;
        every `settle_every`, wait for the worker and run one prompt to its trace. Returns the
        number of these settle points."""
        app, window = QApplication.instance(), self.w
        settled = 0
        for i in range(n_actions):
            name = self.step()
            app.processEvents()
            if uncaught.errors:
                pytest.fail(f"action {i} ({name}) raised:\n{uncaught.errors[0]}")
            if i % settle_every == settle_every - 1:
                # Catch up, then make the model run once more, whatever state the actions left:
                # how many traces the random typing produced depends on the machine's speed
                # (the debounce coalesces keystrokes), these settle traces do not.
                wait_idle(self.qtbot, window)
                # The window describes the model the worker really holds (the worker is idle).
                assert window.state.model_info == window.worker.worker.session.info(), f"after action {i}"
                settle = f"Settle point {i // settle_every}"
                window.prompt_editor.set_text(settle)
                wait_idle(self.qtbot, window, lambda s=settle: window.state.trace is not None
                          and window.state.trace.text == s)
                settled += 1
        return settled

    def listen(self) -> tuple[list[str], list]:
        """(messages, traces): each failure's message and each trace the window gets from now on."""
        messages: list[str] = []
        traces: list = []
        self.w.worker.failed.connect(lambda f: messages.append(f.message))
        self.w.state.trace_changed.connect(traces.append)
        return messages, traces

    def report(self, elapsed: float, traces: list, shown: list[str], messages: list[str]) -> None:
        print(f"\n{sum(self.counts.values())} actions in {elapsed:.1f} s: "
              + ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items(), key=lambda kv: -kv[1])))
        print(f"{len(traces)} traces drawn, {len(shown)} error dialogs, {len(messages)} failures answered")

    def check_end(self, shown: list[str]) -> None:
        """Every message one line and none an internal error (a bug the worker caught); the
        window shows the final trace; closing it ends the worker's thread."""
        window = self.w
        assert all(one_line(m) for m in shown), [m for m in shown if not one_line(m)][:3]
        internal = [m for m in shown if m.startswith("internal error")]
        assert not internal, internal[:3]
        assert window.state.trace.n_tokens == len(window.state.trace.labels) > 0
        assert window.logits.rows() and window.attention.matrix().shape[0] == window.state.trace.n_tokens
        window.close()
        assert window.worker.thread.isFinished()

    def wind_down(self, ckpt: str, final: str) -> None:
        """The window still answers: `ckpt` loaded, every dock back, a clean mask, `final`'s trace."""
        window = self.w
        wait_idle(self.qtbot, window)
        if window.state.model_info.source != ckpt:
            window.load(ckpt)
            wait_idle(self.qtbot, window, lambda: window.state.model_info.source == ckpt)
        for dock in window.docks.values():
            dock.setFloating(False)
            dock.show()
        window.show_view("attention")  # a restored session or the patching view may have put another tab in front
        window.state.set_mask(np.zeros_like(window.state.mask))
        window.prompt_editor.set_text(final)
        wait_idle(self.qtbot, window, lambda: window.state.trace is not None and window.state.trace.text == final)

    # -- prompt -------------------------------------------------------------------------
    @property
    def editor(self):
        return self.w.prompt_editor.edit

    def type_text(self):
        text = "".join(self.rng.choice(TYPED) for _ in range(self.rng.randint(1, 6)))
        self.qtbot.keyClicks(self.editor, text)

    def insert_hostile(self):
        self.editor.insertPlainText("".join(self.rng.choice(HOSTILE_PIECES) for _ in range(self.rng.randint(1, 4))))

    def delete(self):
        if self.rng.random() < 0.15:
            self.qtbot.keyClick(self.editor, Qt.Key_A, Qt.ControlModifier)
        self.qtbot.keyClick(self.editor, self.rng.choice([Qt.Key_Backspace, Qt.Key_Delete, Qt.Key_Left, Qt.Key_End]))

    def ctrl_enter(self):
        self.qtbot.keyClick(self.editor, Qt.Key_Return, Qt.ControlModifier)

    def long_paste(self):
        self.editor.insertPlainText(self.rng.choice(["word " * 3000, "🤗" * 500, "<|endoftext|>" * 300, "\n" * 1000]))

    def example(self):
        acts = [a for a in self.w.actions_.examples_menu.actions() if not a.isSeparator()]
        if acts:
            self.rng.choice(acts).trigger()

    # -- tokens, masks, selection --------------------------------------------------------
    def click_token(self):
        canvas = self.w.token_strip.canvas
        if canvas.rects:
            r = self.rng.choice(canvas.rects)
            self.qtbot.mouseClick(canvas, Qt.LeftButton, pos=r.center())
        else:
            self.qtbot.mouseClick(canvas, Qt.LeftButton, pos=QPoint(5, 5))

    def token_tooltip(self):
        strip = self.w.token_strip
        n = len(strip.canvas.labels)
        strip.tooltip_text(self.rng.randrange(n + 2) if n else 0)

    def _mask_pos(self, layer, head) -> QPoint:
        canvas = self.w.mask_grid.canvas
        left, top = canvas._margins()
        c = canvas._cell()
        return QPointF(left + (head + 0.5) * c, top + (layer + 0.5) * c).toPoint()

    def _random_head(self):
        st = self.w.state
        return self.rng.randrange(st.n_layer), self.rng.randrange(st.n_head)

    def click_mask(self):
        self.qtbot.mouseClick(self.w.mask_grid.canvas, Qt.LeftButton, pos=self._mask_pos(*self._random_head()))

    def right_click_mask(self):
        self.qtbot.mouseClick(self.w.mask_grid.canvas, Qt.RightButton, pos=self._mask_pos(*self._random_head()))

    def mask_button(self):
        self.rng.choice([self.w.mask_grid.clear_button, self.w.mask_grid.invert_button]).click()

    def ablation(self):
        self.rng.choice(list(self.w.mask_grid.ablation_buttons.values())).click()

    def nav(self):
        self.rng.choice(self.w.actions_.nav_actions).trigger()

    def click_head(self):
        st = self.w.state
        layer = self.rng.randint(-1, st.n_layer)  # one past either end now and then
        head = self.rng.randint(-1, st.n_head)
        self.w.head_grid.head_activated.emit(layer, head)

    def click_cell(self):
        T = max(1, self.w.state.n_tokens)
        self.w.attention.cell_clicked.emit(self.rng.randint(-1, T), self.rng.randint(-1, T))

    def _combo(self, combo):
        if combo.count():
            combo.setCurrentIndex(self.rng.randrange(combo.count()))

    def colormap(self):
        self._combo(self.w.attention.colormap_combo)

    def scale(self):
        self._combo(self.w.attention.scale_combo)

    def mode(self):
        self._combo(self.w.attention.mode_combo)

    def colour_mode(self):
        self._combo(self.w.token_strip.combo)

    def neuron(self):
        info = self.w.state.model_info
        n = info.n_mlp if info else 4
        self.w.state.set_neuron(self.rng.choice([None, 0, self.rng.randrange(n + 3)]))

    def hover(self):
        view = self.w.attention.heatmap.graphics
        vp = view.viewport()
        pos = QPoint(self.rng.randrange(max(1, vp.width())), self.rng.randrange(max(1, vp.height())))
        self.qtbot.mouseMove(vp, pos=pos)

    def reset_zoom(self):
        self.w.attention.heatmap.reset_view()

    # -- files ---------------------------------------------------------------------------
    def open_bad(self):
        self.w.load(self.rng.choice(self.bad))

    def drop_bad(self):
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(self.rng.choice(self.bad))])
        event = QDropEvent(QPointF(50, 50), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
        self.w.dragEnterEvent(event)
        self.w.dropEvent(event)

    def open_dialog(self):
        self.rng.choice([self.w.actions_.open_dialog, self.w.actions_.open_folder_dialog])()

    def open_good(self):
        self.w.load(self.rng.choice(self.good))

    def export_bad(self):
        bad = [
            os.path.join(self.out, "no-such-folder", "x.png"),
            os.path.join(self.out, "heatmap.gif"),
            os.path.join(self.out, "noextension"),
            self.out,  # a folder
            os.path.join(self.out, "bad\x00name.png"),
            os.path.join(self.out, "x" * 300 + ".csv"),
            "/proc/version/x.svg",
            "",
            os.path.join(self.out, "grid.npy"),
        ]
        export(self.w, self.rng.choice(["heatmap", "grid"]), self.rng.choice(bad))

    def export_good(self):
        what = self.rng.choice(["heatmap", "grid"])
        ext = self.rng.choice([".png", ".svg", ".npy", ".csv"] if what == "heatmap" else [".png", ".svg"])
        export(self.w, what, os.path.join(self.out, f"ok-{what}{ext}"), scale=self.rng.choice([0.25, 1.0]))

    def export_menu(self):
        acts = [a for a in self.w.actions_.export_menu.actions() if not a.isSeparator()]
        self.rng.choice(acts).trigger()  # dialogs answer "cancelled"

    # -- window ------------------------------------------------------------------------------
    def close_dock(self):
        self.rng.choice(list(self.w.docks.values())).close()

    def show_dock(self):
        dock = self.rng.choice(list(self.w.docks.values()))
        if dock.isHidden():
            dock.toggleViewAction().trigger()

    def float_dock(self):
        dock = self.rng.choice(list(self.w.docks.values()))
        dock.setFloating(not dock.isFloating())

    def resize(self):
        self.w.resize(self.rng.choice([(200, 150), (640, 480), (1440, 900), (2200, 1300), (1000, 300)])[0],
                      self.rng.choice([150, 480, 900]))

    def device(self):
        self.w.set_device(self.rng.choice(["cpu", "cuda"]))

    def recent(self):
        acts = [a for a in self.w.actions_.recent_menu.actions() if not a.isSeparator() and a.isEnabled()]
        if acts:
            self.rng.choice(acts).trigger()

    def session_round_trip(self):
        path = self.w.sessions.save(os.path.join(self.out, "monkey.tvsession"))
        if path is not None:
            self.w.sessions.open(path)

    def open_bad_session(self):
        from tests.helpers.sessions import hostile_sessions

        name, (data, _expect) = self.rng.choice(sorted(hostile_sessions().items()))
        path = os.path.join(self.out, f"bad-{name}.tvsession")
        with open(path, "wb") as f:
            f.write(data)
        self.w.sessions.open(path)

    def cancel(self):
        self.w.worker.cancel(self.rng.choice([None, "trace", "load"]))

    def wait(self):
        self.qtbot.wait(self.rng.randint(0, 20))
