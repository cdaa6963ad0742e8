"""A prompt whose capture would compute more attention than a CPU capture may is one line in the
window, before any layer runs, and the trace shown before it stays. (The bound is lowered here to
what the tiny model computes for 40 tokens; tests/model/capture/test_memory_budget.py checks the count.)"""

from __future__ import annotations

from transformer_viewer.model.capture import memory_budget


def test_the_window_refuses_a_prompt_past_the_work_bound(qtbot, tmp_path, tiny_ckpt, dialogs, monkeypatch):
    from tests.helpers.hardening import TINY, new_window, wait_idle

    window = new_window(qtbot, tmp_path, tiny_ckpt)
    before = window.state.trace
    monkeypatch.setattr(memory_budget, "MAX_CPU_ATTENTION_SCORES", memory_budget.attention_scores(TINY, 40))
    window.run_prompt(" cat" * 50)  # 50 tokens of GPT-2's
    wait_idle(qtbot, window, lambda: window.last_error is not None)
    assert window.last_error.startswith("capturing 50 tokens computes")
    assert "shorten the prompt to 40 tokens or fewer" in window.last_error and "\n" not in window.last_error
    assert window.state.trace is before and not dialogs.shown
    window.run_prompt(" cat" * 30)  # under the bound: a trace again
    wait_idle(qtbot, window, lambda: window.state.trace is not before)
    assert len(window.state.trace.token_ids) == 30
    window.close()
