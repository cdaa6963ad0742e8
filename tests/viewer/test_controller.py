"""The run controller: a state change becomes the requests the window needs, once each, and the
answers land in the state (the trace, then its log-probabilities); the quick prediction of a
head toggle, a failure and an empty prompt leave as signals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.helpers.tolerances import assert_probs_close, largest_logit, model_reduction
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.controller import RunController
from transformer_viewer.viewer.state import ViewerState
from transformer_viewer.viewer.worker.handlers import WorkerSession
from transformer_viewer.viewer.worker.inline import InlineWorker

PROMPT = "the cat sat on the mat and the dog"


class Recording(InlineWorker):
    """An inline worker that keeps the kind of every request it answered."""

    def __init__(self, session):
        super().__init__(session)
        self.kinds = []

    def submit(self, request, on_result=None, on_failure=None, on_progress=None):
        self.kinds.append(request.kind)
        return super().submit(request, on_result, on_failure, on_progress)


def controlled(tiny_ckpt):
    worker = Recording(WorkerSession(load_checkpoint(tiny_ckpt, device="cpu")))
    st = ViewerState()
    controller = RunController(st, worker, st)
    st.set_model(worker.session.info())
    return st, controller, worker


def test_a_prompt_is_traced_once_then_its_log_probabilities_fill_in(qapp, tiny_ckpt):
    st, _controller, worker = controlled(tiny_ckpt)
    traces = []
    st.trace_changed.connect(traces.append)
    st.set_prompt(PROMPT)
    assert worker.kinds == ["trace", "logprobs"]
    assert st.trace is st.clean_trace and st.trace.token_logprobs is not None
    assert len(traces) == 2 and traces[0].token_logprobs is None  # the views first, surprisal after


def test_a_head_toggle_previews_the_prediction_then_traces(qapp, tiny_ckpt):
    st, controller, worker = controlled(tiny_ckpt)
    st.set_prompt(PROMPT)
    previews = []
    controller.preview.connect(lambda nxt, iv: previews.append((nxt, iv)))
    worker.kinds.clear()
    st.toggle_head(1, 0)
    assert worker.kinds[:2] == ["predict", "trace"]
    assert len(previews) == 1 and previews[0][1] == st.intervention
    assert st.trace.intervention == st.intervention and st.clean_trace.intervention.is_empty
    # The preview is the masked run's prediction: the trace that follows agrees with it.
    session = worker.session
    assert_probs_close(previews[0][0].top_probs, st.trace.next.top_probs, reduction=model_reduction(session.config),
                       depth=session.config.n_layer + 1, what="the preview against the trace",
                       logit_scale=largest_logit(session.model, session.tokens.ids))


def test_the_prediction_follows_the_selected_token(qapp, tiny_ckpt):
    st, _controller, worker = controlled(tiny_ckpt)
    st.set_prompt(PROMPT)
    worker.kinds.clear()
    st.set_selection(query=2)
    assert worker.kinds[0] == "trace" and st.trace.next.position == 2
    worker.kinds.clear()
    st.set_selection(layer=1)  # the same position: nothing to run
    assert worker.kinds == []


def test_no_prompt_asks_for_one_and_a_failure_is_one_line(qapp, tiny_ckpt):
    st, controller, _worker = controlled(tiny_ckpt)
    asked, failed, cancelled = [], [], []
    controller.needs_prompt.connect(lambda: asked.append(True))
    controller.failed.connect(failed.append)
    controller.cancelled.connect(lambda: cancelled.append(True))
    controller.run()
    assert asked == [True]

    class Failing:
        def __init__(self, cancelled):
            self.cancelled = cancelled

        def submit(self, request, on_result=None, on_failure=None, on_progress=None):
            on_failure(SimpleNamespace(request=request, cancelled=self.cancelled,
                                       message="error: the prompt is too long"))

    controller.worker = Failing(cancelled=False)
    st.set_prompt(PROMPT)
    assert failed == ["error: the prompt is too long"] and st.trace is None and not cancelled
    controller.worker = Failing(cancelled=True)
    controller.run()
    assert cancelled == [True] and len(failed) == 1


def test_a_controller_that_does_not_follow_runs_only_when_asked_and_raises(qapp, tiny_ckpt):
    worker = Recording(WorkerSession(load_checkpoint(tiny_ckpt, device="cpu")))
    st = ViewerState()
    controller = RunController(st, worker, st, follow=False)
    st.set_model(worker.session.info())
    st.set_prompt(PROMPT)
    assert worker.kinds == [] and st.trace is None
    controller.run()
    assert worker.kinds == ["trace", "logprobs"] and st.trace.token_logprobs is not None
    st.set_prompt("x" * 10)
    worker.session.memory_budget = 1  # no run fits: the inline worker's error reaches the caller
    with pytest.raises(ModelError):
        controller.run()
