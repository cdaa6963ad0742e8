"""The worker thread survives any failure of a handler: a Rust panic (a BaseException, which an
`except Exception` lets through) or another BaseException answers its request with one line, and
the window's next prompt is traced as usual."""

from __future__ import annotations

import pytest

from tests.helpers.handlers import swap_handler
from tests.helpers.hardening import UncaughtExceptions, new_window, one_line, wait_idle
from tests.helpers.panics import a_panic
from transformer_viewer.viewer.worker.requests import TraceRequest


class Strange(BaseException):
    """Neither an Exception nor one of those that stop the program."""


def _failing_once(monkeypatch, request_type, error: BaseException) -> list:
    """Make the handler of `request_type` raise `error` on its next call, then work again."""
    raised = []

    def handler(*args):
        if not raised:
            raised.append(error)
            raise error
        return real(*args)

    real = swap_handler(monkeypatch, request_type, handler)
    return raised


@pytest.mark.parametrize("error, says", [(a_panic(), "panicked (index out of bounds"),
                                         (Strange("odd"), "internal error (strange: odd)")])
def test_a_handler_raising_a_base_exception_is_answered_and_the_next_prompt_traced(
        qtbot, tmp_path, tiny_ckpt, dialogs, monkeypatch, error, says):
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    try:
        raised = _failing_once(monkeypatch, TraceRequest, error)
        with UncaughtExceptions() as uncaught:
            window.state.set_prompt("The dog sat on the log.")
            wait_idle(qtbot, window, lambda: bool(raised) and window.last_error is not None)
            failure = window.last_error
            window.state.set_prompt("The cat sat on the mat. The cat")
            wait_idle(qtbot, window, lambda: window.state.trace is not None
                      and window.state.trace.text == "The cat sat on the mat. The cat")
        assert one_line(failure) and says in failure.lower(), failure
        assert window.worker.thread.isRunning()
        assert not uncaught.errors, uncaught.errors
    finally:
        window.close()
