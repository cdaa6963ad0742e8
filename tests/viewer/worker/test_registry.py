"""The worker's one table of routes: every request type has exactly one handler, each handler
is a function of (session, request, progress, is_cancelled), and the table keeps torch off the
thread that imports it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest

from transformer_viewer.viewer import worker
from transformer_viewer.viewer.worker import registry
from transformer_viewer.viewer.worker.requests import Request


def _request_types() -> set[type]:
    """Every Request subclass the worker package defines (all its modules imported)."""
    for info in pkgutil.iter_modules(worker.__path__):
        importlib.import_module(f"{worker.__name__}.{info.name}")
    found, todo = set(), [Request]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith(worker.__name__ + "."):
                found.add(sub)
    return found


def test_every_request_type_has_exactly_one_route():
    routed = [route.request for route in registry.ROUTES]
    twice = sorted({t.__name__ for t in routed if routed.count(t) > 1})
    assert not twice, f"routed more than once: {twice}"
    missing = sorted(t.__name__ for t in _request_types() - set(routed))
    assert not missing, f"request types without a handler: {missing}"
    assert set(registry.HANDLERS) == set(routed)


def test_each_handler_takes_session_request_progress_and_cancel_flag():
    for route in registry.ROUTES:
        handler, needs_session = registry.lookup_handler(route.request)
        assert callable(handler), route
        assert len(inspect.signature(handler).parameters) == 4, route
        assert needs_session == route.needs_session


def test_a_subclass_is_not_answered_by_its_parents_handler():
    @dataclass(frozen=True)
    class Unrouted(Request):
        kind: ClassVar[str] = "test-unrouted"

    with pytest.raises(KeyError, match="registry.py"):
        registry.lookup_handler(Unrouted)


def test_a_route_must_name_a_request_type_and_a_module_function():
    with pytest.raises(TypeError):
        registry.Route(int, lambda *a: None)
    with pytest.raises(ValueError, match="module:function"):
        registry.Route(Request, "transformer_viewer.viewer.worker.handlers.handle_load")


def test_importing_the_table_imports_neither_torch_nor_qt():
    code = ("import sys, transformer_viewer.viewer.worker.registry; "
            "print('HEAVY', sorted(m for m in ('torch', 'PySide6') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout, out.stdout
