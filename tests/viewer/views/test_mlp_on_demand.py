"""The MLP view and the token strip's neuron colouring on a session that keeps no full
activations: the layer's activations come from the worker (equal to model.on_demand's), a
superseded request's answer is dropped, and a long prompt is drawn pooled with its maxima kept."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.interventions import ablating
from tests.helpers.models import scaled_init_loaded
from tests.helpers.window import WAIT_MS
from transformer_viewer.model.capture.on_demand import mlp_activations
from transformer_viewer.viewer.worker.handlers import WorkerSession
from transformer_viewer.viewer.worker.mlp import MlpActivationsRequest
from transformer_viewer.viewer.worker.requests import TraceRequest

PROMPT = "The cat sat on the mat because the cat was tired, and the dog barked at the cat all night"


@pytest.fixture()
def compact(qtbot):
    """A real worker thread whose session keeps only summaries, and a state with its traces."""
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.worker.client import WorkerClient

    client = WorkerClient()
    session = WorkerSession(scaled_init_loaded(seed=4))
    assert not session.keep_full
    client.worker.session = session
    state = ViewerState()
    state.set_model(session.info())
    state.set_prompt(PROMPT)
    yield client, session, state
    client.close()


def run_traces(qtbot, client, state, mask=None):
    got = []
    client.submit(TraceRequest(text=PROMPT, intervention=ablating(mask)), on_result=got.append)
    qtbot.waitUntil(lambda: bool(got) and not client.busy, timeout=WAIT_MS)
    if mask is not None:
        state.set_mask(mask)
    state.set_traces(got[0].value.trace, got[0].value.clean)
    assert state.trace.mlp_post is None


def test_view_and_strip_draw_on_demand_activations_equal_to_the_model_s(qtbot, compact):
    from transformer_viewer.viewer.views.mlp_view import MLPView
    from transformer_viewer.viewer.views.token_strip import TokenStrip, chip_values

    client, session, state = compact
    run_traces(qtbot, client, state)
    view = MLPView(state, client)
    strip = TokenStrip(state)
    strip.set_mode("none")  # the attention colouring is another view's business
    qtbot.addWidget(view)
    qtbot.addWidget(strip)
    assert view.matrix().size == 0  # hidden: nothing asked for; the table lists summaries
    assert "fetching" in view.top_title.text()
    view.show()
    state.set_selection(layer=1, query=5)
    qtbot.waitUntil(lambda: view.matrix().size > 0 and not client.busy, timeout=WAIT_MS)
    want = mlp_activations(session, state.trace, 1)  # (T, n_mlp)
    np.testing.assert_array_equal(state.layer_activations(state.trace, 1), want)
    np.testing.assert_array_equal(view.matrix(), want[:, view.order()].T)
    assert view.order()[0] == int(np.argmax(state.trace.mlp_max[1]))
    top = view.top_list()
    assert top[0][0] == int(np.argmax(want[5])) and top[0][1] == pytest.approx(float(want[5].max()), abs=1e-4)
    state.set_neuron(top[1][0])
    assert strip.mode == "neuron"
    values, legend = chip_values(state, "neuron")
    np.testing.assert_array_equal(values, want[:, top[1][0]])
    # the diff asks for the clean run's activations too
    mask = np.zeros((2, 4), dtype=bool)
    mask[0, 1] = True
    asked = []
    submit = client.submit
    client.submit = lambda request, **kw: (asked.append(request), submit(request, **kw))[1]
    run_traces(qtbot, client, state, mask)
    qtbot.waitUntil(lambda: view.matrix().size > 0 and not client.busy, timeout=WAIT_MS)
    runs = [r.run_ids for r in asked if isinstance(r, MlpActivationsRequest)]
    assert runs == [(state.trace.run_id,)]  # no diff shown: only the masked run is fetched
    view.diff.setChecked(True)
    assert view.diff.active
    qtbot.waitUntil(lambda: view.matrix().size > 0 and not client.busy, timeout=WAIT_MS)
    masked, clean = mlp_activations(session, state.trace, 1), mlp_activations(session, state.clean_trace, 1)
    assert np.abs(masked - clean).max() > 1e-4
    np.testing.assert_array_equal(view.matrix(), (masked - clean)[:, view.order()].T)
    change = np.abs(masked - clean).max(axis=0)
    assert view.order()[0] == int(np.argmax(change))


def test_a_superseded_request_s_answer_is_dropped(qtbot, compact):
    client, session, state = compact
    run_traces(qtbot, client, state)
    answers = []
    first = client.submit(MlpActivationsRequest(run_ids=(state.trace.run_id,), layer=0), on_result=answers.append)
    client.submit(MlpActivationsRequest(run_ids=(state.trace.run_id,), layer=1), on_result=answers.append)
    qtbot.waitUntil(lambda: not client.busy, timeout=WAIT_MS)
    assert first.done and [a.value.layer for a in answers] == [1]
    np.testing.assert_array_equal(answers[0].value.acts[state.trace.run_id], mlp_activations(session, state.trace, 1))
    # activations of a run that is no longer the state's are not kept
    state.set_layer_activations(1, {state.trace.run_id: answers[0].value.acts[state.trace.run_id], -5: np.zeros(1)})
    assert state.layer_activations(state.trace, 1) is not None and (-5, 1) not in state._activations


def test_a_long_prompt_is_pooled_with_its_spikes_kept(qtbot):
    from tests.helpers.fake_traces import fake_state
    from transformer_viewer.viewer.views.mlp_view import MLPView

    state = fake_state(n_tokens=3000, n_mlp=2048, keep_full=True)
    acts = state.trace.mlp_post[0]
    acts[1234, 7] = 50.0  # one spike at one token
    state.set_selection(layer=0)
    view = MLPView(state)
    qtbot.addWidget(view)
    view.set_sort("index")
    shown = view.heatmap.matrix()
    assert view.matrix().shape == (64, 3000) and shown.shape[1] <= 1024
    np.testing.assert_array_equal(shown.max(axis=1), view.matrix().max(axis=1))
    col = int(np.argmax(shown[7]))
    view._on_cell_click(7, col)
    assert state.neuron == 7 and state.query_index == 1234


def test_an_inline_worker_answers_a_hidden_view_for_the_token_strip(qtbot):
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.views.mlp_view import MLPView
    from transformer_viewer.viewer.views.token_strip import TokenStrip, chip_values
    from transformer_viewer.viewer.worker.inline import InlineWorker

    session = WorkerSession(scaled_init_loaded(seed=4))
    worker = InlineWorker(session)
    state = ViewerState()
    state.set_model(session.info())
    state.set_prompt(PROMPT)
    got = []
    worker.submit(TraceRequest(text=PROMPT), on_result=got.append)
    state.set_traces(got[0].value.trace, got[0].value.clean)
    view = MLPView(state, worker)  # never shown: it fetches only for the strip's neuron
    strip = TokenStrip(state)
    strip.set_mode("none")
    qtbot.addWidget(view)
    qtbot.addWidget(strip)
    assert state.layer_activations(state.trace, 0) is None
    state.set_neuron(7)
    values, _ = chip_values(state, "neuron")
    np.testing.assert_array_equal(values, mlp_activations(session, state.trace, 0)[:, 7])
    np.testing.assert_array_equal(view.matrix(), mlp_activations(session, state.trace, 0)[:, view.order()].T)


def test_sixteen_thousand_neurons_rank_all_and_draw_at_most_a_thousand(qtbot):
    from tests.helpers.fake_traces import fake_state
    from transformer_viewer.viewer.views.mlp_view import MAX_ROWS, MLPView

    state = fake_state(n_tokens=40, n_mlp=16384, keep_full=True)
    view = MLPView(state)
    qtbot.addWidget(view)
    view.rows_spin.setValue(5000)
    assert view.rows_spin.value() == MAX_ROWS and view.matrix().shape == (MAX_ROWS, 40)
    peak = state.trace.mlp_post[0].max(axis=0)
    np.testing.assert_array_equal(view.order(), np.argsort(-peak, kind="stable")[:MAX_ROWS])
