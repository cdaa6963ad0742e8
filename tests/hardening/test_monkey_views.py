"""GUI monkey test of the analysis views and the long tasks: seeded random actions against the
real offscreen window holding a small model with a 1,024-token context, so long prompts pool
their overviews and zooms fetch full-resolution tiles: a Llama-style checkpoint of ours (rotary
positions, RMSNorm, a gated MLP, grouped key/value heads, sliding-window layers) with GPT-2's
tokenizer, and a Gemma 2 Hugging Face folder (soft-capping, norms around each sublayer, a scaled
embedding) with its own SentencePiece-style tokenizer.json (a BOS, byte-fallback pieces).

Tabs are switched while their requests run; scans and generation are started, stopped and
restarted; the lens, attribution, MLP and diff views are asked for and made stale by new prompts
and masks; the heatmaps zoom anywhere (past the ends too); every view and a head's whole pattern
are exported to good and bad paths; loads are started and cancelled. As in the first monkey
test, nothing may escape, every message is one line and none an internal error, and the window
still answers at the end."""

from __future__ import annotations

import os
import random
import time

import pytest
from PySide6.QtWidgets import QApplication

from tests.helpers.hardening import UncaughtExceptions, new_window, save_tiny, wait_idle
from tests.helpers.monkey import Monkey
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.viewer.window.pattern_export import export_pattern

SEED = int(os.environ.get("TV_MONKEY_SEED", "20261204"))  # override to explore other sequences
N_ACTIONS = 1200
SETTLE_EVERY = 150
LLAMA_STYLE = GPTConfig(n_layer=4, n_head=4, n_kv_head=2, n_embd=32, n_mlp=48, block_size=1024, bias=False,
                        positional="rotary", norm="rmsnorm", mlp="gated", activation="silu", sliding_window=200,
                        layer_types=("sliding", "full", "sliding", "full"))
PROSE = ("The keeper climbed the stairs of the lighthouse every evening, lit the lamp and wrote the weather "
         "in the log. ")
TARGETS = ["", " the", "the cat", "0", "50256", "99999999", "-3", "\U0001f917", " keeper", " ", "12 34"]
ANALYSIS_TABS = ("residual", "mlp", "logit-lens", "scan", "diff", "attribution", "routes", "rollout")  # view ids


class ViewsMonkey(Monkey):
    """The first monkey's prompt, mask and selection actions, with the analysis views' own."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        keep = {"type", "insert hostile text", "delete", "ctrl+enter", "click token", "click mask cell",
                "clear/invert mask", "ablation", "layer/head keys", "click head thumbnail", "click heatmap cell",
                "average mode", "hover heatmap", "colormap", "log scale", "token colour mode", "neuron",
                "close dock", "show dock", "float dock", "resize", "cancel", "wait"}
        self.actions = [a for a in self.actions if a[1] in keep] + [
            (10, "switch tab", self.switch_tab), (3, "long prompt", self.long_prompt),
            (4, "scan", self.scan), (2, "cancel scan", self.cancel_scan), (1, "scan shows", self.scan_shown),
            (3, "continue", self.generate), (2, "stop", self.stop_generating),
            (2, "lens diff", self.lens_diff), (2, "click lens", self.click_lens),
            (2, "mlp controls", self.mlp_controls), (2, "select query", self.select_query),
            (5, "zoom", self.zoom), (2, "zoom diff", self.zoom_diff), (2, "pooling", self.pooling),
            (3, "export a view", self.export_view), (2, "export pattern", self.export_pattern),
            (1, "load and cancel", self.load_and_cancel),
        ]
        self.weights = [a[0] for a in self.actions]

    def view(self, view_id: str):
        return self.w.views[view_id]

    @property
    def n_tokens(self) -> int:
        return max(1, self.w.state.n_tokens)

    def switch_tab(self):
        self.w.tabs.setCurrentIndex(self.rng.randrange(self.w.tabs.count()))

    def long_prompt(self):
        text = PROSE * self.rng.randint(5, 80)  # up to past the 1,024-token context
        self.w.prompt_editor.set_text(text)
        if self.rng.random() < 0.6:  # and, as a user who pasted it would, wait for its views
            # (a prompt longer than the context keeps its end: the trace's text is a tail of it)
            wait_idle(self.qtbot, self.w, lambda: self.w.state.trace is not None
                      and len(self.w.state.trace.text) > len(PROSE) and text.endswith(self.w.state.trace.text))

    def scan(self):
        scan = self.view("scan")
        scan.target_edit.setText(self.rng.choice(TARGETS))
        scan.distractor_edit.setText(self.rng.choice(["", "", " the", " keeper", "x y"]))
        scan.run_button.click()

    def cancel_scan(self):
        self.view("scan").cancel_button.click()

    def scan_shown(self):
        self._combo(self.view("scan").shown_combo)

    def generate(self):
        g = self.view("continue")
        g.n_spin.setValue(self.rng.randint(1, 12))
        self._combo(g.mode_combo)
        g.button.click()

    def stop_generating(self):
        self.view("continue").stop_button.click()

    def lens_diff(self):
        self.view("logit-lens").diff.click()

    def click_lens(self):
        T = self.n_tokens
        self.view("logit-lens").heatmap.cell_clicked.emit(self.rng.randint(-1, 8), self.rng.randint(-1, T))

    def mlp_controls(self):
        mlp = self.view("mlp")
        self.rng.choice([lambda: self._combo(mlp.sort_combo), lambda: mlp.rows_spin.setValue(self.rng.randint(1, 400)),
                         mlp.clear_button.click])()

    def select_query(self):
        self.w.state.set_selection(query=self.rng.randrange(self.n_tokens))

    def _zoom(self, heatmap):
        T = self.n_tokens
        a, b = sorted(self.rng.randint(-20, T + 20) for _ in range(2))
        c, d = sorted(self.rng.randint(-20, T + 20) for _ in range(2))
        heatmap.set_visible_tokens((a, b + 1), (c, d + 1))

    def _show(self, page) -> None:
        """Mostly the tab shown first, as a user zooms what they see; now and then one behind another."""
        if self.rng.random() < 0.7:
            self.w.tabs.setCurrentIndex(self.w.tabs.indexOf(page))

    def zoom(self):
        self._show(self.w.attention.parentWidget())
        if self.rng.random() < 0.2:
            self.w.attention.heatmap.reset_view()
        else:
            self._zoom(self.w.attention.heatmap)

    def zoom_diff(self):
        self._show(self.view("diff"))
        self._zoom(self.view("diff").heatmap)

    def pooling(self):
        self._combo(self.w.attention.pooling_combo)

    def _path(self, exts) -> str:
        if self.rng.random() < 0.3:
            return self.rng.choice([os.path.join(self.out, "no-such-folder", "x.png"), self.out, "",
                                    os.path.join(self.out, "bad\x00name.npy"), "/proc/version/x.svg",
                                    os.path.join(self.out, "x.gif")])
        return os.path.join(self.out, "ok" + self.rng.choice(exts))

    def export_view(self):
        view = self.view(self.rng.choice(ANALYSIS_TABS))
        view.export_button.export(self._path([".png", ".svg", ".pdf", ".npy", ".csv"]), scale=0.5)

    def export_pattern(self):
        handle = export_pattern(self.w, self._path([".npy"]))
        if handle is not None and self.rng.random() < 0.3:
            self.w.worker.cancel(None)

    def load_and_cancel(self):
        self.w.load(self.rng.choice(self.good))
        if self.rng.random() < 0.7:
            self.qtbot.wait(self.rng.randint(0, 30))
            self.w.worker.cancel("load")


def gemma2_folder(folder) -> str:
    """A random Gemma 2 model saved as Hugging Face does, with a tokenizer.json of its style."""
    from tests.helpers import tokenizers
    from tests.helpers.hf_family_models import build
    from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer

    tokenizers.metaspace(str(folder))
    build("gemma2", vocab_size=load_tokenizer(str(folder)).n_vocab, max_position_embeddings=1024,
          sliding_window=200).save_pretrained(str(folder))
    return str(folder)


@pytest.mark.parametrize("family", ["llama-style", "gemma2"])
def test_monkey_views(qtbot, tmp_path, dialogs, no_cuda, family):
    other = save_tiny(tmp_path / "other.safetensors", 1, LLAMA_STYLE.replace(n_layer=2, layer_types=()))
    if family == "gemma2":
        model = gemma2_folder(tmp_path / "gemma2")
    else:
        model = save_tiny(tmp_path / "llama-style.safetensors", 0, LLAMA_STYLE)
    out = tmp_path / "exports"
    out.mkdir()
    window = new_window(qtbot, tmp_path, model)
    monkey = ViewsMonkey(qtbot, window, random.Random(SEED), [], [model, other], str(out))
    messages, traces = monkey.listen()
    app = QApplication.instance()
    t0 = time.perf_counter()
    with UncaughtExceptions() as uncaught:
        settled = monkey.run(N_ACTIONS, SETTLE_EVERY, uncaught)
        monkey.wind_down(model, "The final prompt of the views monkey")
        window.tabs.setCurrentIndex(window.tabs.indexOf(window.views["logit-lens"]))
        wait_idle(qtbot, window, lambda: window.views["logit-lens"]._current() is not None)  # the final trace's
        window.tabs.setCurrentIndex(window.tabs.indexOf(window.attention.parentWidget()))  # redrawn once shown
        app.processEvents()
    monkey.report(time.perf_counter() - t0, traces, dialogs.shown, messages)
    assert not uncaught.errors, uncaught.errors[0]
    assert sum(monkey.counts.values()) == N_ACTIONS and settled == N_ACTIONS // SETTLE_EVERY < len(traces)
    assert monkey.counts.get("scan", 0) > 10 and monkey.counts.get("zoom", 0) > 20
    # Long prompts pooled their overviews, and zooms asked the worker for full-resolution tiles.
    assert any(t.overview_cell > 1 for t in traces) and window.attention.tiles.requested > 0
    assert messages + dialogs.shown, "the bad paths and targets must have been refused"
    monkey.check_end(messages + dialogs.shown)
