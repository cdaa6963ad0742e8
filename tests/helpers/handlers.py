"""Swapping a request's handler for the length of one test.

The worker's routes are one fixed table (viewer/worker/registry.py); a test that needs a handler
to fail, wait or count its calls replaces one route through pytest's monkeypatch, which puts
the real one back when the test ends.
"""

from __future__ import annotations

from transformer_viewer.viewer.worker import registry


def swap_handler(monkeypatch, request_type, handler, needs_session=None):
    """Answer `request_type` with `handler` during the test; returns the handler it replaces
    (None for a request type the app does not route, such as a test's own)."""
    old = registry.HANDLERS.get(request_type)
    if needs_session is None:
        needs_session = True if old is None else old.needs_session
    monkeypatch.setitem(registry.HANDLERS, request_type, registry.Route(request_type, handler, needs_session))
    return None if old is None else registry.resolve(old.handler)
