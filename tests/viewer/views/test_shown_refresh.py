"""Views behind another tab wait for the user: a new trace leaves them stale, and showing them
draws the state as it is then; outside a shown window they draw at once."""

from __future__ import annotations

import numpy as np

from tests.helpers.window import mask_of, wait_idle
from transformer_viewer.viewer.views.diff_view import attention_diff


def test_hidden_tabs_redraw_when_shown(window, qtbot):
    w = window
    residual, diff = w.views["Residual stream"], w.views["Attention diff"]
    assert not residual.isVisible() and not diff.isVisible()  # the attention tab is in front
    before = w.state.trace
    w.state.set_mask(mask_of(w, (0, 1)))
    wait_idle(qtbot, w, lambda: w.state.trace is not before and w.state.trace.mask[0, 1])
    trace, clean = w.state.trace, w.state.clean_trace
    assert residual._refresh_waiting and diff._refresh_waiting
    assert residual._drawn_norms is None or residual._drawn_norms[0] is not trace  # not drawn while hidden
    assert diff._shown is None or diff._shown[0] is not trace

    w.show_view("Residual stream")
    qtbot.waitUntil(residual.isVisible)
    assert not residual._refresh_waiting and residual._drawn_norms[0] is trace
    np.testing.assert_array_equal(residual.matrix(), trace.resid_norms.astype(np.float32))

    w.show_view("Attention diff")
    qtbot.waitUntil(diff.isVisible)
    assert not diff._refresh_waiting and diff._shown[:2] == (trace, clean)
    np.testing.assert_array_equal(diff.matrix(), attention_diff(trace, clean, w.state.layer, w.state.head))
    assert residual._drawn_norms[0] is trace  # hidden again, nothing new to draw


def test_a_view_outside_a_shown_window_draws_at_once(window, qtbot):
    from transformer_viewer.viewer.views.residual_view import ResidualView

    view = ResidualView(window.state)  # never shown, as the export command builds it
    qtbot.addWidget(view)
    assert view._drawn_norms[0] is window.state.trace and not view._refresh_waiting
