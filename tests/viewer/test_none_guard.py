"""The None-reference workaround for PySide6 6.12 on Python 3.11 is in place once the viewer is imported."""

import sys

import pytest

import transformer_viewer.viewer  # noqa: F401  (applies the guard)
from transformer_viewer.viewer import none_guard


@pytest.mark.skipif(not none_guard.needed(), reason="None is immortal on Python 3.12+")
def test_none_has_a_reserve():
    assert sys.getrefcount(None) > none_guard.RESERVE // 2
    assert none_guard.apply() is False  # once per process


def test_many_void_calls_survive(qapp):
    from PySide6 import QtCore

    r = QtCore.QRectF(0, 0, 1, 1)
    for _ in range(50_000):  # more than None's natural reference count: fatal without the guard
        r.setWidth(2.0)
    assert r.width() == 2.0
