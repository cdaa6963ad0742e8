"""The trace handler on a long capture: progress per layer, and a cancellation that stops it at
the next layer, unless a newer request for the same prompt would redo the clean run."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.interventions import ablating
from tests.helpers.models import scaled_init_loaded
from transformer_viewer.viewer.worker import handlers
from transformer_viewer.viewer.worker.handlers import WorkerSession, handle_trace
from transformer_viewer.viewer.worker.requests import Cancelled, DeviceRequest, LoadRequest, TraceRequest

PROMPT = "The cat sat on the mat because the cat was tired, and the dog barked at the cat all night"


class Flag:
    """A worker's cancel flag: raised after `after` polls, by `newer` (None: the user)."""

    def __init__(self, after: int, newer=None):
        self.after, self.polls, self.newer = after, 0, newer

    def __call__(self) -> bool:
        self.polls += 1
        return self.polls > self.after


@pytest.fixture()
def session():
    return WorkerSession(scaled_init_loaded(seed=4))


def reports_each_layer(handler, session, request, monkeypatch):
    """Run `handler` with progress shown at once: it must report every layer in order; returns
    the last progress text and the handler's answer."""
    monkeypatch.setattr(handlers, "PROGRESS_AFTER_S", 0.0)
    seen = []
    result = handler(session, request, lambda *a: seen.append(a), lambda: False)
    L = session.config.n_layer
    assert [a[:2] for a in seen] == [(layer, L) for layer in range(L)]
    return seen[-1][2], result


def test_a_long_capture_reports_its_layers(session, monkeypatch):
    last, result = reports_each_layer(handle_trace, session, TraceRequest(text=PROMPT), monkeypatch)
    L = session.config.n_layer
    assert last == f"computing layer {L} of {L}…"
    assert result.trace is session.clean


def test_a_short_capture_shows_no_progress(session):
    seen = []
    handle_trace(session, TraceRequest(text=PROMPT), lambda *a: seen.append(a), lambda: False)
    assert seen == []  # under PROGRESS_AFTER_S: no bar, no Cancel button flashing


def test_the_user_cancelling_stops_the_clean_capture(session):
    with pytest.raises(Cancelled):
        handle_trace(session, TraceRequest(text=PROMPT), lambda *a: None, Flag(after=1))
    assert session.clean is None
    # The next request captures from scratch and gets what an undisturbed one gets.
    again = handle_trace(session, TraceRequest(text=PROMPT), lambda *a: None, lambda: False).trace
    fresh = handle_trace(WorkerSession(scaled_init_loaded(seed=4)), TraceRequest(text=PROMPT), lambda *a: None,
                         lambda: False).trace
    np.testing.assert_array_equal(again.overview_max, fresh.overview_max)


def test_a_newer_prompt_stops_the_clean_capture(session):
    with pytest.raises(Cancelled):
        handle_trace(session, TraceRequest(text=PROMPT), lambda *a: None,
                     Flag(after=1, newer=TraceRequest(text=PROMPT + " again")))
    assert session.clean is None


def test_a_head_toggled_during_the_clean_capture_lets_it_finish_for_the_next_request(session):
    L, nh = session.config.n_layer, session.config.n_head
    mask = np.zeros((L, nh), dtype=bool)
    mask[L - 1, 0] = True
    newer = TraceRequest(text=PROMPT, intervention=ablating(mask))
    flag = Flag(after=1, newer=newer)
    with pytest.raises(Cancelled):  # its own answer is stale: the newer request answers
        handle_trace(session, TraceRequest(text=PROMPT), lambda *a: None, flag)
    assert flag.polls > L and session.clean is not None  # every layer ran and the clean trace is kept
    clean = session.clean
    answer = handle_trace(session, newer, lambda *a: None, lambda: False)
    assert answer.clean is clean and answer.trace.first_layer_run == L - 1  # only the toggled layer ran


def test_a_newer_mask_stops_the_masked_capture(session):
    handle_trace(session, TraceRequest(text=PROMPT), lambda *a: None, lambda: False)
    L, nh = session.config.n_layer, session.config.n_head
    mask = np.zeros((L, nh), dtype=bool)
    mask[0, 1] = True
    other = mask.copy()
    other[0, 2] = True
    with pytest.raises(Cancelled):
        handle_trace(session, TraceRequest(text=PROMPT, intervention=ablating(mask)), lambda *a: None,
                     Flag(after=0, newer=TraceRequest(text=PROMPT, intervention=ablating(other))))
    assert session.masked is None


def test_the_log_probability_pass_reports_the_vocabulary_done(session, monkeypatch):
    from transformer_viewer.viewer.worker.handlers import handle_logprobs
    from transformer_viewer.viewer.worker.requests import LogprobsRequest

    handle_trace(session, TraceRequest(text=PROMPT), lambda *a: None, lambda: False)
    monkeypatch.setattr(handlers, "PROGRESS_AFTER_S", 0.0)
    seen = []
    result = handle_logprobs(session, LogprobsRequest(text=PROMPT), lambda *a: seen.append(a), lambda: False)
    assert result.trace.token_logprobs is not None
    V = session.n_vocab
    done = [a[0] for a in seen]
    assert done == sorted(done) and done[-1] == V and all(a[1] == V for a in seen)


def test_a_superseded_prediction_stops(session, monkeypatch):
    from transformer_viewer.viewer.worker.handlers import handle_predict
    from transformer_viewer.viewer.worker.requests import PredictRequest

    handle_trace(session, TraceRequest(text=PROMPT), lambda *a: None, lambda: False)
    L, nh = session.config.n_layer, session.config.n_head
    mask = np.zeros((L, nh), dtype=bool)
    mask[0, 1] = True
    with pytest.raises(Cancelled):
        handle_predict(session, PredictRequest(text=PROMPT, intervention=ablating(mask)), lambda *a: None,
                       Flag(after=0, newer=PredictRequest(text=PROMPT, intervention=ablating(~mask))))
    monkeypatch.setattr(handlers, "PROGRESS_AFTER_S", 0.0)
    seen = []
    answer = handle_predict(session, PredictRequest(text=PROMPT, intervention=ablating(mask)), lambda *a: seen.append(a), lambda: False)
    assert answer.next is not None and [a[:2] for a in seen] == [(layer, L) for layer in range(L)]


def test_another_query_position_during_the_masked_capture_lets_it_finish(session):
    handle_trace(session, TraceRequest(text=PROMPT), lambda *a: None, lambda: False)
    L, nh = session.config.n_layer, session.config.n_head
    mask = np.zeros((L, nh), dtype=bool)
    mask[0, 1] = True
    newer = TraceRequest(text=PROMPT, intervention=ablating(mask.copy()), position=3)
    with pytest.raises(Cancelled):
        handle_trace(session, TraceRequest(text=PROMPT, intervention=ablating(mask)), lambda *a: None, Flag(after=0, newer=newer))
    kept = session.masked[1]
    answer = handle_trace(session, newer, lambda *a: None, lambda: False)
    assert answer.trace.run_id == kept.run_id and answer.trace.next.position == 3  # only the prediction moved


def test_a_load_reports_its_tensors(tiny_ckpt, monkeypatch):
    monkeypatch.setattr(handlers, "PROGRESS_AFTER_S", 0.0)
    seen = []
    answer = handlers.handle_load(None, LoadRequest(path=tiny_ckpt, device="cpu"), lambda *a: seen.append(a),
                                  lambda: False)
    n = len(list(answer.session.model.parameters()))
    assert seen[0] == (0, 0, "loading tiny.safetensors…")
    assert seen[1:n + 1] == [(i, n, f"loading tiny.safetensors: checking the weights ({i + 1} of {n} tensors)…")
                             for i in range(n)]
    assert seen[n + 1:] == [(0, 0, "fingerprinting tiny.safetensors…")]  # for saved sessions, once per load


def test_a_loaded_model_runs_from_packed_weights_and_packs_again_after_a_move(tiny_ckpt):
    """The worker only reads the weights: the blocks' layers keep oneDNN's layout (model/kernels/linear.py)."""
    from transformer_viewer.model.kernels.linear import Linear

    answer = handlers.handle_load(None, LoadRequest(path=tiny_ckpt, device="cpu"), lambda *a: None, lambda: False)
    layers = [m for m in answer.session.model.blocks.modules() if isinstance(m, Linear)]
    if not layers[0].can_pack():
        pytest.skip("this torch build cannot pack weights for oneDNN")
    assert layers and all(m._packed is not None for m in layers)
    for m in layers:
        m.unpack()
    handlers.handle_device(answer.session, DeviceRequest(device="cpu"), lambda *a: None, lambda: False)
    assert all(m._packed is not None for m in layers)
    # The next load replaces this session: its copies go before the new model's are made.
    handlers.handle_load(answer.session, LoadRequest(path=tiny_ckpt, device="cpu"), lambda *a: None, lambda: False)
    assert all(m._packed is None for m in layers)


def test_a_cancelled_load_stops_and_installs_nothing(tiny_ckpt):
    flag = Flag(after=2)
    with pytest.raises(Cancelled):
        handlers.handle_load(None, LoadRequest(path=tiny_ckpt, device="cpu"), lambda *a: None, flag)
    assert flag.polls == 3  # it stopped at the poll that said so


@pytest.mark.parametrize("module, request_name, handler_name, text", [
    ("routes", "RoutesRequest", "handle_routes", "following the routes through layer"),
    ("rollout", "RolloutRequest", "handle_rollout", "rolling out layer"),
])
def test_routes_and_rollout_report_their_layers_and_stop_when_cancelled(session, monkeypatch, module, request_name,
                                                                        handler_name, text):
    import importlib

    mod = importlib.import_module(f"transformer_viewer.viewer.worker.{module}")
    request_type, handler = getattr(mod, request_name), getattr(mod, handler_name)
    extra = {"stop": 3} if module == "rollout" else {}
    last, _result = reports_each_layer(handler, session, request_type(text=PROMPT, **extra), monkeypatch)
    L = session.config.n_layer
    assert last == f"{text} {L} of {L}…"
    flag = Flag(after=1)
    with pytest.raises(Cancelled):
        handler(session, request_type(text=PROMPT, **extra), lambda *a: None, flag)
    assert flag.polls == 2  # after the first layer, at the second poll


def test_attribution_reports_its_layers_and_stops_when_cancelled(session, monkeypatch):
    from transformer_viewer.viewer.worker.attribution import AttributionRequest, handle_attribution

    last, result = reports_each_layer(handle_attribution, session, AttributionRequest(text=PROMPT), monkeypatch)
    L = session.config.n_layer
    assert last == f"attributing the writers of layer {L} of {L}…" and result.heads.shape[0] == L
    assert result.total() == pytest.approx(result.logit, rel=1e-4, abs=1e-4)
    flag = Flag(after=1)
    with pytest.raises(Cancelled):
        handle_attribution(session, AttributionRequest(text=PROMPT), lambda *a: None, flag)
    assert flag.polls == 2  # after the first layer, at the second poll
