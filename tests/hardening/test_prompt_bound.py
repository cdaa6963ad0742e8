"""A prompt past the length a prompt may have is one line in the window, before anything is
tokenized, and the trace shown before it stays. (The bound is lowered here so the window need not
hold millions of characters; tests/model/tokenizers/test_tokenizer_config.py checks the real one.)"""

from __future__ import annotations

from transformer_viewer.model.tokenizers import tokenizer


def test_the_window_refuses_a_prompt_past_the_bound(qtbot, tmp_path, tiny_ckpt, dialogs, monkeypatch):
    from tests.helpers.hardening import new_window, wait_idle

    window = new_window(qtbot, tmp_path, tiny_ckpt)
    before = window.state.trace
    monkeypatch.setattr(tokenizer, "MAX_PROMPT_CHARS", 1000)
    window.run_prompt("ab " * 334)
    wait_idle(qtbot, window, lambda: window.last_error is not None)
    assert window.last_error.startswith("the prompt is 1,002 characters, more than the 1,000 a prompt may have")
    assert window.state.trace is before and not dialogs.shown
    assert window.prompt_editor.notice.text() == window.last_error
    window.run_prompt("ab " * 300)  # under the bound: a trace again
    wait_idle(qtbot, window, lambda: window.state.trace is not before)
    window.close()
