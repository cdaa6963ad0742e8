"""Views behind another tab wait for the user: a new trace leaves them stale, and showing them
draws the state as it is then; outside a shown window they draw at once."""

from __future__ import annotations

import numpy as np

from tests.helpers.window import mask_of, wait_idle
from transformer_viewer.viewer.views.attention_panel import attention_matrix
from transformer_viewer.viewer.views.diff_view import attention_diff
from transformer_viewer.viewer.window import actions as window_actions


def test_hidden_tabs_redraw_when_shown(window, qtbot):
    w = window
    residual, diff = w.views["residual"], w.views["diff"]
    assert not residual.isVisible() and not diff.isVisible()  # the attention tab is in front
    before = w.state.trace
    w.state.set_mask(mask_of(w, (0, 1)))
    wait_idle(qtbot, w, lambda: w.state.trace is not before and w.state.trace.mask[0, 1])
    trace, clean = w.state.trace, w.state.clean_trace
    assert residual._refresh_waiting and diff._refresh_waiting
    assert residual._drawn_norms is None or residual._drawn_norms[0] is not trace  # not drawn while hidden
    assert diff._shown is None or diff._shown[0] is not trace

    w.show_view("residual")
    qtbot.waitUntil(residual.isVisible)
    assert not residual._refresh_waiting and residual._drawn_norms[0] is trace
    np.testing.assert_array_equal(residual.matrix(), trace.resid_norms.astype(np.float32))

    w.show_view("diff")
    qtbot.waitUntil(diff.isVisible)
    assert not diff._refresh_waiting and diff._shown[:2] == (trace, clean)
    np.testing.assert_array_equal(diff.matrix(), attention_diff(trace, clean, w.state.layer, w.state.head))
    assert residual._drawn_norms[0] is trace  # hidden again, nothing new to draw


def test_a_view_outside_a_shown_window_draws_at_once(window, qtbot):
    from transformer_viewer.viewer.views.residual_view import ResidualView

    view = ResidualView(window.state)  # never shown, as the export command builds it
    qtbot.addWidget(view)
    assert view._drawn_norms[0] is window.state.trace and not view._refresh_waiting


def test_the_attention_panel_behind_another_tab_catches_up_when_shown_or_exported(window, qtbot, tmp_path):
    w = window
    panel = w.attention
    w.show_view("residual")
    qtbot.waitUntil(lambda: not panel.isVisible())
    before = w.state.trace
    w.state.set_mask(mask_of(w, (1, 2)))
    wait_idle(qtbot, w, lambda: w.state.trace is not before and w.state.trace.mask[1, 2])
    w.state.set_selection(layer=1, head=3)
    trace = w.state.trace
    assert panel._refresh_waiting and panel._trace is not trace and (panel._layer, panel._head) != (1, 3)

    # File > Export reads the panel while it is hidden: it draws the current head first.
    path = window_actions.export(w, "heatmap", str(tmp_path / "head.npy"))
    want = attention_matrix(trace.overview_max, 1, 3, "head", trace.mask)[0]
    np.testing.assert_array_equal(np.load(path), want)
    assert not panel._refresh_waiting and panel._trace is trace

    w.state.set_selection(layer=0, head=1)  # hidden again: waits
    assert panel._refresh_waiting and (panel._layer, panel._head) == (1, 3)
    w.show_view("attention")
    qtbot.waitUntil(panel.isVisible)
    assert not panel._refresh_waiting and (panel._layer, panel._head) == (0, 1)
    np.testing.assert_array_equal(panel.matrix(), attention_matrix(trace.overview_max, 0, 1, "head", trace.mask)[0])


def test_a_closed_heads_grid_redraws_when_reopened_or_exported(window, qtbot, tmp_path):
    w = window
    grid, dock = w.head_grid, w.docks["grid"]
    dock.close()
    qtbot.waitUntil(lambda: not grid.isVisible())
    drawn = grid._overviews[0]
    before = w.state.trace
    w.state.set_mask(mask_of(w, (0, 2)))
    wait_idle(qtbot, w, lambda: w.state.trace is not before and w.state.trace.mask[0, 2])
    trace = w.state.trace
    assert grid._refresh_waiting and grid._overviews[0] is drawn  # not redrawn while closed
    assert grid._mask[0, 2]  # the cross on the toggled head still crosses at once

    assert window_actions.export(w, "grid", str(tmp_path / "grid.png")) is not None
    assert not grid._refresh_waiting and grid._overviews[0] is trace.overview_max

    w.state.set_mask(mask_of(w))
    wait_idle(qtbot, w, lambda: w.state.trace is not trace and not w.state.trace.mask.any())
    assert grid._refresh_waiting
    w.show_view("grid")
    qtbot.waitUntil(grid.isVisible)
    assert not grid._refresh_waiting and grid._overviews[0] is w.state.trace.overview_max


def test_the_mlp_view_behind_another_tab_draws_when_shown_and_still_serves_a_selected_neuron(window, qtbot):
    w = window
    view, st = w.views["mlp"], w.state
    assert not view.isVisible()
    view.top_title.setText("as it was")
    before = st.trace
    st.set_mask(mask_of(w, (1, 0)))
    wait_idle(qtbot, w, lambda: st.trace is not before and st.trace.mask[1, 0])
    trace = st.trace
    assert view.top_title.text() == "as it was"  # nothing drawn behind the tab
    assert st.layer_activations(trace, st.layer) is None  # and nothing asked of the worker

    st.set_neuron(3)  # the token strip colours by it: the hidden view asks for its layer
    wait_idle(qtbot, w, lambda: st.layer_activations(trace, st.layer) is not None)
    assert view.top_title.text() == "as it was"

    w.show_view("mlp")
    qtbot.waitUntil(lambda: view._drawn is not None and view._drawn[0] is trace)
    assert view.matrix().shape[1] == trace.n_tokens


def test_a_closed_floating_heads_grid_waits_too(window, qtbot):
    w = window
    grid, dock = w.head_grid, w.docks["grid"]
    dock.setFloating(True)
    qtbot.waitUntil(grid.isVisible)
    dock.close()
    qtbot.waitUntil(lambda: not grid.isVisible())
    before = w.state.trace
    w.state.set_mask(mask_of(w, (1, 1)))
    wait_idle(qtbot, w, lambda: w.state.trace is not before and w.state.trace.mask[1, 1])
    assert grid._refresh_waiting and grid._overviews[0] is not w.state.trace.overview_max
    dock.show()
    qtbot.waitUntil(grid.isVisible)
    assert not grid._refresh_waiting and grid._overviews[0] is w.state.trace.overview_max
    dock.setFloating(False)


def test_a_closed_token_strip_lays_out_the_new_prompt_when_reopened(window, qtbot):
    w = window
    strip, dock = w.token_strip, w.docks["prompt"]
    dock.close()
    qtbot.waitUntil(lambda: not strip.isVisible())
    shown = strip.canvas.labels
    before = w.state.trace
    w.run_prompt("a different prompt entirely")
    wait_idle(qtbot, w, lambda: w.state.trace is not before and w.state.trace.labels != shown)
    trace = w.state.trace
    assert strip._refresh_waiting and strip.canvas.labels == shown  # no layout while closed

    dock.show()
    qtbot.waitUntil(strip.isVisible)
    assert not strip._refresh_waiting and strip.canvas.labels == trace.labels
    assert len(strip.canvas.rects) == trace.n_tokens and strip.canvas.selected == w.state.query_index
