"""The window with a model that brings its own tokenizer.json: the token strip, the next-token
table, the lens and the scan fields label tokens with that tokenizer, and special tokens are
drawn apart from the prompt's text."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.tokenizers import own_tokenizer_folder
from tests.helpers.window import new_window, wait_idle
from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer

PROMPT = "Hello world, the capital of France"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return own_tokenizer_folder(str(tmp_path_factory.mktemp("own-gui") / "model"))


@pytest.fixture
def window(qtbot, tmp_path, folder):
    w = new_window(qtbot, tmp_path, folder, prompt=PROMPT)
    yield w
    w.close()


def test_strip_and_tables_use_the_models_tokenizer(qtbot, window, folder):
    tok = load_tokenizer(folder)
    expected = tok.tokenize(PROMPT)
    wait_idle(qtbot, window, lambda: window.state.trace is not None and window.state.trace.labels == expected.labels)
    st = window.state
    assert st.model_info.tokenizer == tok.spec and st.tokenizer() is tok
    canvas = window.token_strip.canvas
    assert canvas.labels == expected.labels and canvas.labels[0] == "<s>"
    assert canvas.special == (True,) + (False,) * (len(expected.ids) - 1)
    assert "special token" in window.token_strip.tooltip_text(0)
    assert "special token" not in window.token_strip.tooltip_text(1)
    # The next-token table names ids in this vocabulary, not GPT-2's.
    top = [int(i) for i in st.trace.next.top_ids[:3]]
    shown = [window.logits.table.item(r, 1).text() for r in range(3)]
    assert shown == [tok.label(i) for i in top]


def test_special_chips_are_drawn_differently(qtbot, window, folder):
    wait_idle(qtbot, window, lambda: window.state.trace is not None)
    canvas = window.token_strip.canvas
    window.state.set_selection(query=len(canvas.labels) - 1)  # neither chip compared below is selected
    window.token_strip.set_mode("none")  # every chip on the same background: only the style differs
    canvas.resize(600, 200)
    image = canvas.grab().toImage()

    def border_colors(i):
        r = canvas.rects[i]
        return {image.pixelColor(x, r.top() + 1).name() for x in range(r.left() + 5, r.right() - 5)}

    special, plain = border_colors(0), border_colors(1)
    assert special != plain and len(plain) == 1
    rgb = [(int(c[1:3], 16), int(c[3:5], 16), int(c[5:7], 16)) for c in special]
    assert any(b > g + 40 and r > g for r, g, b in rgb)  # the dashed purple border, where it is drawn


def test_lens_and_scan_use_the_models_tokenizer(qtbot, tmp_path, folder):
    from tests.helpers.window import analysis_views, idle_and, open_window

    w = open_window(qtbot, tmp_path, folder, PROMPT)
    try:
        tok = load_tokenizer(folder)
        a = analysis_views(w)
        a.scan.target_edit.setText(" the")
        a.scan.distractor_edit.setText("")
        target, distractor = a.scan.parse_inputs()
        assert target == tok.encode(" the", add_special_tokens=False)[0] and distractor is None
        w.show_view("logit-lens")
        qtbot.waitUntil(idle_and(w, lambda: a.lens._current() is not None), timeout=30000)
        r = a.lens._current()
        w.state.set_selection(query=3)
        assert a.lens.table.item(0, 1).text() == tok.label(int(r.lens.top_ids[0, 3]))
        final = tok.label(int(r.lens.final_ids[3]))
        assert f"final top token {final!r}" in a.lens.info.text()
    finally:
        w.close()


def test_special_tokens_in_the_next_token_table_are_italic(qtbot, window, folder):
    wait_idle(qtbot, window, lambda: window.state.trace is not None)
    from transformer_viewer.model.capture.trace import NextToken

    tok = load_tokenizer(folder)
    panel, st = window.logits, window.state
    nxt = st.trace.next
    ids = [1, int(nxt.top_ids[0])] if int(nxt.top_ids[0]) != 1 else [1, 5]  # <s> first, then an ordinary token
    fake = NextToken(position=nxt.position, probs=nxt.probs, top_ids=np.array(ids), top_probs=np.array([0.6, 0.4],
                     dtype=np.float32), top_logits=np.zeros(2, dtype=np.float32))
    panel._fill(fake, fake)
    first, second = panel.table.item(0, 1), panel.table.item(1, 1)
    assert first.text() == "<s>" and first.font().italic() and "special" in first.toolTip()
    assert second.text() == tok.label(ids[1]) and not second.font().italic()


def test_a_folder_with_a_broken_tokenizer_is_one_line_and_keeps_the_model(qtbot, window, folder, tmp_path):
    import shutil

    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.errors import CheckpointError

    wait_idle(qtbot, window, lambda: window.state.trace is not None)
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {')
    with pytest.raises(CheckpointError) as loader_error:
        load_checkpoint(str(broken))
    info, trace = window.state.model_info, window.state.trace
    window.load(str(broken))
    wait_idle(qtbot, window, lambda: window.last_error is not None)
    assert window.last_error == str(loader_error.value) and "tokenizer.json" in window.last_error
    assert "\n" not in window.last_error
    assert window.state.model_info is info and window.state.trace is trace
    window._error_box.close()
    assert window.state.tokenizer() is load_tokenizer(folder)  # the labels still come from the model in use
