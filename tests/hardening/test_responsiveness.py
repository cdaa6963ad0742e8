"""Long prompts in the real window: a 1 MB paste is tokenized on the worker, cut to the model's
context with a notice, and typing at its end re-runs it; prompts far past the context, every
token a wide chip, run. How long the GUI thread stalls meanwhile is measured by
bench/gui_stalls.py, not asserted here (a timing depends on the machine's load)."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from tests.helpers.hardening import new_window, wait_idle
from tests.helpers.hostile_prompts import one_megabyte


def test_a_one_megabyte_paste_is_cut_to_the_context_and_typing_goes_on(qtbot, tmp_path, tiny_ckpt, dialogs):
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    st = window.state
    big = one_megabyte(seed=7)
    editor = window.prompt_editor.edit
    editor.setFocus()
    clipboard = QApplication.clipboard()
    clipboard.setText(big)
    has_clipboard = clipboard.text() == big

    def paste():  # Ctrl+A, Ctrl+V
        editor.selectAll()
        if has_clipboard:
            editor.paste()
        else:  # a platform without a clipboard: what paste would insert
            editor.insertPlainText(big)

    QTimer.singleShot(0, paste)
    wait_idle(qtbot, window, lambda: st.trace is not None and st.trace.dropped_tokens > 0)
    assert big.endswith(st.trace.text) and st.trace.n_tokens == 64
    assert "longer than the model's context" in window.prompt_editor.notice.text()
    # Keep typing at the end of the 1 MB prompt: every edit re-runs it.
    editor.moveCursor(editor.textCursor().MoveOperation.End)
    qtbot.keyClicks(editor, " and more")
    wait_idle(qtbot, window, lambda: st.trace is not None and st.trace.text.endswith(" and more"))
    assert big.endswith(st.trace.text[: -len(" and more")]) and st.trace.n_tokens == 64
    assert not dialogs.shown
    window.close()


def test_long_prompts_of_wide_chips_run_in_the_window(qtbot, tmp_path, tiny_ckpt, dialogs):
    """Far past block_size, with every token a wide chip: each prompt's trace arrives, cut to the context."""
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    st = window.state
    for text in ("日本語 🤗 " * 400, "x" * 3000 + " y", "\n" * 2000, "<|endoftext|>" * 200):
        window.run_prompt(text)
        wait_idle(qtbot, window, lambda text=text: st.trace is not None and text.endswith(st.trace.text))
        assert st.trace.n_tokens == 64 and st.trace.dropped_tokens > 0
    assert not dialogs.shown
    window.close()
