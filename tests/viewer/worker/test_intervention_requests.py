"""Requests carry an Intervention made (and checked) once, by whoever asks; the handlers take it
as it is, and the worker's caches hit on an equal value made anew."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.interventions import count_makes
from tests.helpers.models import scaled_init_loaded
from transformer_viewer.model.capture.interventions import Intervention
from transformer_viewer.viewer.worker.handlers import (
    WorkerSession,
    handle_logprobs,
    handle_predict,
    handle_trace,
)
from transformer_viewer.viewer.worker.lens import LensRequest, handle_lens
from transformer_viewer.viewer.worker.requests import LogprobsRequest, PredictRequest, TraceRequest
from transformer_viewer.viewer.worker.scan import ScanRequest, handle_scan

PROMPT = "The cat sat on the mat because the cat was tired"


def _quiet(*_a):
    pass


def _never() -> bool:
    return False


@pytest.fixture()
def session():
    return WorkerSession(scaled_init_loaded(seed=4))


def masked(session, ablation="zero") -> Intervention:
    mask = np.zeros((session.config.n_layer, session.config.n_head), dtype=bool)
    mask[1, 2] = True
    return Intervention.make(session.config, mask, ablation)


@pytest.fixture
def makes(monkeypatch):
    """How many times Intervention.make runs (each time, the one check)."""
    return count_makes(monkeypatch)


def test_the_handlers_take_the_value_as_it_was_made(session, makes):
    change = masked(session, "mean")
    assert len(makes) == 1
    handle_trace(session, TraceRequest(text=PROMPT, intervention=change), _quiet, _never)
    handle_logprobs(session, LogprobsRequest(text=PROMPT, intervention=change), _quiet, _never)
    handle_predict(session, PredictRequest(text=PROMPT, intervention=change, position=3), _quiet, _never)
    handle_lens(session, LensRequest(text=PROMPT, intervention=change), _quiet, _never)
    handle_scan(session, ScanRequest(text=PROMPT, intervention=change), _quiet, _never)
    assert len(makes) == 1


def test_the_masked_trace_is_reused_for_an_equal_value_made_anew_and_not_for_another(session):
    first = handle_trace(session, TraceRequest(text=PROMPT, intervention=masked(session)), _quiet, _never).trace
    again = handle_trace(session, TraceRequest(text=PROMPT, intervention=masked(session)), _quiet, _never).trace
    assert again is first  # the cache's answer to "is this current": equal Interventions
    other = handle_trace(session, TraceRequest(text=PROMPT, intervention=masked(session, "mean")), _quiet,
                         _never).trace
    assert other is not first and other.intervention == masked(session, "mean")
    assert not np.array_equal(other.next.probs, first.next.probs)
