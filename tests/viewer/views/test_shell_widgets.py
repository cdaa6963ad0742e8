"""ViewerState, the prompt editor's debounce, and the token strip's layout at 1000 tokens."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.state import ModelInfo, ViewerState
from transformer_viewer.viewer.views.prompt_editor import PromptEditor
from transformer_viewer.viewer.views.token_strip import ChipCanvas

INFO = ModelInfo(name="m", format="native", source="/m.safetensors", n_layer=3, n_head=4, n_embd=16,
                 block_size=64, n_params=1234567, device="cpu")


class Spy:
    def __init__(self, state):
        self.events = []
        for name in ("model_changed", "trace_changed", "clean_trace_changed", "selection_changed",
                     "mask_changed", "neuron_changed", "prompt_changed"):
            getattr(state, name).connect(lambda *a, n=name: self.events.append(n))


class FakeTrace:
    def __init__(self, T):
        self.n_tokens = T


def test_state_signals_fire_on_change_only(qapp):
    st = ViewerState()
    spy = Spy(st)
    st.set_model(INFO)
    assert st.mask.shape == (3, 4) and spy.events == ["model_changed"]
    st.set_selection(layer=2, head=9)  # clamped
    assert (st.layer, st.head) == (2, 3)
    st.set_selection(layer=2, head=3)
    assert spy.events.count("selection_changed") == 1
    st.toggle_head(1, 1)
    st.set_mask(st.mask.copy())  # same values: no signal
    assert spy.events.count("mask_changed") == 1 and st.is_masked
    with pytest.raises(ModelError, match=r"head mask has shape \(2, 2\); this model needs \(3, 4\)"):
        st.set_mask(np.zeros((2, 2), bool))  # checked where the Intervention is made
    with pytest.raises(ValueError):
        st.mask[0, 0] = True  # read-only: changes go through set_mask
    st.set_ablation("mean")
    assert spy.events.count("mask_changed") == 2
    st.set_neuron(7)
    st.set_neuron(7)
    assert spy.events.count("neuron_changed") == 1
    st.set_prompt("a")
    st.set_prompt("a")
    assert spy.events.count("prompt_changed") == 1


def test_query_none_means_last_and_follows_the_trace(qapp):
    st = ViewerState()
    st.set_model(INFO)
    assert st.query_index is None
    trace = FakeTrace(10)
    st.set_traces(trace, trace)
    assert st.query_index == 9
    st.set_selection(query=3)
    assert st.query == 3 and st.query_index == 3
    st.set_selection(query=9)  # the last token: follow the end of the prompt
    assert st.query is None
    st.set_selection(query=5)
    shorter = FakeTrace(4)
    st.set_traces(shorter, shorter)
    assert st.query is None and st.query_index == 3


def test_clean_and_masked_traces_signal_in_order(qapp):
    st = ViewerState()
    st.set_model(INFO)
    spy = Spy(st)
    clean, masked = FakeTrace(5), FakeTrace(5)
    st.set_traces(masked, clean)
    assert spy.events == ["clean_trace_changed", "trace_changed"]
    st.set_traces(clean, clean)  # mask cleared: the clean trace again, the baseline unchanged
    assert spy.events[-1] == "trace_changed" and spy.events.count("clean_trace_changed") == 1


def test_a_new_model_resets_what_no_longer_fits(qapp):
    st = ViewerState()
    st.set_model(INFO)
    st.set_selection(layer=2, head=3)
    st.toggle_head(2, 3)
    st.set_model(ModelInfo(**{**INFO.__dict__, "device": "cuda"}))  # same model, other device: kept
    assert st.mask[2, 3] and st.layer == 2
    st.set_model(ModelInfo(**{**INFO.__dict__, "source": "/other", "n_layer": 2, "n_head": 2}))
    assert st.mask.shape == (2, 2) and not st.mask.any() and (st.layer, st.head) == (1, 1)
    assert INFO.params_text == "1.2M params"


def test_prompt_editor_debounces_and_runs_on_ctrl_enter(qtbot):
    assert PromptEditor().timer.interval() == 250
    editor = PromptEditor(debounce_ms=60_000)  # nothing can fire by time while typing
    qtbot.addWidget(editor)
    runs = []
    editor.run_requested.connect(runs.append)
    qtbot.keyClicks(editor.edit, "abc")
    assert runs == [] and editor.timer.isActive() and editor.timer.isSingleShot()
    qtbot.keyClick(editor.edit, Qt.Key_Return, Qt.ControlModifier)
    assert runs == ["abc"] and not editor.timer.isActive()  # at once, and the pending run is dropped
    assert "\n" not in editor.text()
    editor.timer.setInterval(50)
    qtbot.keyClicks(editor.edit, "d")
    qtbot.waitUntil(lambda: runs[-1] == "abcd", timeout=5000)
    qtbot.wait(120)
    assert runs == ["abc", "abcd"]  # one run per pause


def labels(n):
    words = ["·the", "·cat", "·sat", "·on", "·a", "·mat", ".", "⏎", "·extraordinarily", "·x"]
    return tuple(words[i % len(words)] for i in range(n))


def test_token_chips_wrap_and_hit_test_at_1000_tokens(qtbot):
    canvas = ChipCanvas()
    qtbot.addWidget(canvas)
    canvas.resize(700, 100)
    canvas.set_tokens(labels(1000))
    assert len(canvas.rects) == 1000
    assert all(r.right() < 700 for r in canvas.rects)
    assert len(set(r.top() for r in canvas.rects)) > 20  # wrapped into many lines
    assert canvas.minimumHeight() > canvas.rects[-1].bottom()
    for i in (0, 1, 57, 500, 999):
        assert canvas.index_at(canvas.rects[i].center()) == i
    assert canvas.index_at(QPoint(699, 1)) is None
    canvas.set_selected(999)
    image = canvas.grab()
    assert image.width() == 700
    # long labels are cut, never wider than the strip
    canvas.resize(120, 100)
    canvas.set_tokens(("·" + "a" * 200,))
    assert canvas.rects[0].width() <= 120


@pytest.mark.parametrize("width", [80, 133, 700, 2000])
def test_token_chips_wrap_greedily_at_every_width(qtbot, width):
    from transformer_viewer.viewer.views.chip_canvas import GAP

    canvas = ChipCanvas()
    qtbot.addWidget(canvas)
    rng = np.random.default_rng(width)
    canvas.set_tokens(tuple("x" * int(k) for k in rng.integers(1, 30, size=3000)))
    canvas._laid_out_width = -1
    canvas._layout(width)
    rects = list(canvas.rects)
    lines: dict[int, list] = {}
    for i, r in enumerate(rects):
        lines.setdefault(r.top(), []).append(i)
    tops = sorted(lines)
    assert tops == canvas._row_tops and [lines[t][0] for t in tops] == canvas._row_first
    for t, nxt in zip(tops, tops[1:] + [None], strict=True):
        chips = lines[t]
        assert chips == list(range(chips[0], chips[-1] + 1))  # in prompt order
        assert rects[chips[0]].left() == GAP
        for a, b in zip(chips, chips[1:], strict=False):
            assert rects[b].left() == rects[a].left() + rects[a].width() + GAP
        end = rects[chips[-1]].left() + rects[chips[-1]].width()
        assert len(chips) == 1 or end <= width - GAP  # fits, unless alone on its line
        if nxt is not None:  # greedy: the next line's first chip would not have fitted
            assert end + GAP + rects[lines[nxt][0]].width() > width - GAP
