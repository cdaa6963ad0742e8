"""GUI monkey test of SAE features in the window: seeded random actions against the real offscreen
window with SAEs opened, refused and let go. Good and hostile SAE files and labels files are
opened (a width that fits no layer, a shape lie, a hook point the model lacks, junk); features
are picked in the panel and typed in the feature view; clamps of every kind are added at every
token or one, removed and cleared, mixed with head toggles, prompts and Continue; the BOS
toggle, the SAE box and the feature tab (shown, closed) are worked; another model is loaded, which
lets its SAEs and clamps go. As in the other monkey tests, nothing may escape, every message is one
line and none an internal error, and the window still answers at the end: the SAE opens again and
lists the final prompt's features."""

from __future__ import annotations

import os
import random
import time

import numpy as np
from PySide6.QtWidgets import QApplication

from tests.helpers.hardening import TINY, UncaughtExceptions, new_window, save_tiny, wait_idle
from tests.helpers.monkey import Monkey
from tests.helpers.saes import random_weights, saelens_cfg, write_npz, write_saelens

SEED = int(os.environ.get("TV_MONKEY_SEED", "20261205"))  # override to explore other sequences
N_ACTIONS = 600
SETTLE_EVERY = 150
D_IN = TINY.n_embd
KINDS = ("set", "scale", "zero")


def sae_files(tmp_path) -> tuple[list[str], list[str], list[str]]:
    """(good SAEs, bad SAEs, labels files good and bad) for the tiny model."""
    good = [
        write_saelens(tmp_path / "resid0", saelens_cfg("standard", D_IN, 40, "blocks.0.hook_resid_post"),
                      _louder(random_weights("standard", D_IN, 40, seed=1))),
        write_saelens(tmp_path / "resid1", saelens_cfg("topk", D_IN, 32, "blocks.1.hook_resid_pre", k=4),
                      random_weights("topk", D_IN, 32, seed=2)),
        write_npz(tmp_path / "npz" / "params.npz", random_weights("jumprelu", D_IN, 24, seed=3))
        + "@blocks.1.hook_resid_post",
    ]
    wide = write_saelens(tmp_path / "wide", saelens_cfg("standard", D_IN + 8, 20, "blocks.0.hook_resid_post"),
                         random_weights("standard", D_IN + 8, 20))
    lying = write_saelens(tmp_path / "lying", saelens_cfg("standard", D_IN, 64, "blocks.0.hook_resid_post"),
                          random_weights("standard", D_IN, 20))
    nowhere = write_saelens(tmp_path / "nowhere", saelens_cfg("standard", D_IN, 20, "blocks.7.hook_resid_post"),
                            random_weights("standard", D_IN, 20))
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "cfg.json").write_bytes(b"\x00\xff{not json")
    bad = [wide, lying, nowhere, str(junk), str(tmp_path / "missing"), str(tmp_path / "npz" / "params.npz")]
    labels_good = tmp_path / "labels.csv"
    labels_good.write_text("id,label\n" + "".join(f"{i},label {i}\n" for i in range(0, 40, 3)))
    labels_bad = tmp_path / "labels.json"
    labels_bad.write_bytes(b"[{\"index\": \"x\"")
    return good, bad, [str(labels_good), str(labels_bad), str(tmp_path / "no-labels.csv")]


def _louder(weights):
    weights["W_enc"] *= 4.0  # most tokens fire several features
    return weights


class SaeMonkey(Monkey):
    """The first monkey's prompt, mask and dock actions, with the SAE views' own."""

    def __init__(self, *args, saes, bad_saes, labels, **kwargs):
        super().__init__(*args, **kwargs)
        self.saes, self.bad_saes, self.labels = saes, bad_saes, labels
        keep = {"type", "delete", "ctrl+enter", "click token", "click mask cell", "clear/invert mask",
                "ablation", "close dock", "show dock", "cancel", "wait"}
        self.actions = [a for a in self.actions if a[1] in keep] + [
            (6, "open SAE", self.open_sae), (3, "open bad SAE", self.open_bad_sae),
            (2, "open labels", self.open_labels), (8, "pick feature", self.pick_feature),
            (3, "type feature", self.type_feature), (8, "clamp", self.clamp), (3, "remove clamp", self.remove_clamp),
            (1, "clear clamps", self.clear_clamps), (2, "BOS", self.bos), (2, "choose SAE", self.choose_sae),
            (3, "feature tab", self.feature_tab), (2, "close feature tab", self.close_feature_tab),
            (3, "select query", self.select_query), (1, "continue", self.generate),
            (0.5, "other model", self.other_model),
        ]
        self.weights = [a[0] for a in self.actions]

    @property
    def panel(self):
        return self.w.views["token-features"]

    @property
    def feature_view(self):
        return self.w.views["features"]

    def open_sae(self):
        self.w.sae_menu.open(self.rng.choice(self.saes))

    def open_bad_sae(self):
        self.w.sae_menu.open(self.rng.choice(self.bad_saes), hook=self.rng.choice([None, None, "blocks.0.hook_z"]))

    def open_labels(self):
        self.w.sae_menu.open_labels(self.rng.choice(self.labels))

    def pick_feature(self):
        rows = self.panel.table.rowCount()
        if rows:
            self.panel.table.selectRow(self.rng.randrange(rows))

    def type_feature(self):
        self.feature_view.feature_box.setValue(self.rng.randint(-3, 70))

    def clamp(self):
        controls = self.rng.choice([self.panel.clamp_controls, self.feature_view.clamp_controls])
        controls.set_choice(self.rng.choice(KINDS), self.rng.choice([0.0, -5.0, 0.5, 3.0, 40.0, 1e4]),
                            here=self.rng.random() < 0.4)
        controls.button.click()

    def remove_clamp(self):
        clamps = self.panel.clamp_list
        if clamps.list.count():
            clamps.list.setCurrentRow(self.rng.randrange(clamps.list.count()))
            clamps.remove_button.click()

    def clear_clamps(self):
        self.panel.clamp_list.clear_button.click()

    def bos(self):
        self.panel.bos_box.toggle()

    def choose_sae(self):
        box = self.panel.sae_box
        if box.count():
            box.setCurrentIndex(self.rng.randrange(box.count()))

    def feature_tab(self):
        self.w.show_view("features")

    def close_feature_tab(self):
        tabs = self.w.tabs
        index = tabs.indexOf(self.feature_view)
        if tabs.isTabVisible(index):
            tabs.setTabVisible(index, False)

    def select_query(self):
        self.w.state.set_selection(query=self.rng.randrange(max(1, self.w.state.n_tokens)))

    def generate(self):
        control = self.w.views["continue"]
        control.n_spin.setValue(self.rng.randint(1, 4))
        control.button.click()

    def other_model(self):
        self.w.load(self.rng.choice(self.good))


def test_monkey_saes(qtbot, tmp_path, dialogs, no_cuda):
    model = save_tiny(tmp_path / "tiny.safetensors", 0)
    other = save_tiny(tmp_path / "other.safetensors", 1, TINY.replace(n_embd=24, n_head=3))
    saes, bad, labels = sae_files(tmp_path)
    window = new_window(qtbot, tmp_path, model)
    monkey = SaeMonkey(qtbot, window, random.Random(SEED), [], [model, model, other], str(tmp_path),
                       saes=saes, bad_saes=bad, labels=labels)
    messages, traces = monkey.listen()
    t0 = time.perf_counter()
    with UncaughtExceptions() as uncaught:
        monkey.run(N_ACTIONS, SETTLE_EVERY, uncaught)
        monkey.wind_down(model, "The final prompt of the SAE monkey")
        window.sae_menu.open(saes[0])
        panel = window.views["token-features"]
        wait_idle(qtbot, window, lambda: panel.result is not None and panel.key() == panel._key)
        # A clamp under a masked head at the end, whatever the random actions reached under the machine's load.
        mask = np.zeros_like(window.state.mask)
        mask[0, 1] = True
        window.state.set_mask(mask)
        panel.table.selectRow(0)
        panel.clamp_controls.set_choice("scale", 3.0, here=False)
        panel.clamp_controls.button.click()
        wait_idle(qtbot, window, lambda: window.state.trace is not None and bool(window.state.trace.intervention.clamps)
                  and window.state.trace.intervention.n_masked > 0)
        window.tabs.setCurrentIndex(window.tabs.indexOf(window.attention.parentWidget()))  # redrawn once shown
        QApplication.instance().processEvents()
    monkey.report(time.perf_counter() - t0, traces, dialogs.shown, messages)
    assert not uncaught.errors, uncaught.errors[0]
    assert monkey.counts.get("clamp", 0) > 10 and monkey.counts.get("open bad SAE", 0) > 3
    assert any("SAE" in m or "sae" in m for m in dialogs.shown)  # the bad files were refused, in words
    assert any(t.intervention.clamps for t in traces) and any(t.intervention.n_masked and t.intervention.clamps
                                                               for t in traces)  # clamps ran, with masks too
    assert panel.result.ids.shape[0] == window.state.trace.n_tokens
    monkey.check_end(dialogs.shown)
