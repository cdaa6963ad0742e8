"""Keep Python 3.11 alive under PySide6 6.12: its bindings return None without a new reference.

With PySide6/shiboken6 6.12.0 on CPython < 3.12 every call of a void method (QPainter.setPen,
QRectF.setWidth, QLabel.setText, ...) and every method that returns a null pointer as None
drops one reference to None that it never took. None starts with a few thousand references, so
an app that paints (pyqtgraph calls dozens of such methods per frame) dies within seconds with
"Fatal Python error: none_dealloc". Python 3.12 made None immortal (PEP 683), which is why the
bindings get away with it there.

`apply()` gives None 2**48 extra references once, which a leak of one per call cannot use up.
It checks that it is touching the reference count (CPython, standard object layout) and does
nothing on 3.12+. Importing Qt is not needed, so `transformer_viewer.viewer` applies it on import.
"""

from __future__ import annotations

import platform
import sys

RESERVE = 1 << 48
_applied = False


def needed() -> bool:
    return platform.python_implementation() == "CPython" and sys.version_info < (3, 12)


def apply() -> bool:
    """Top up None's reference count once per process; True if it did."""
    global _applied
    if _applied or not needed():
        return False
    import ctypes

    # True and False are singletons too, and bool-returning calls leak them the same way
    # ("Fatal Python error: bool_dealloc" at exit after many paints).
    for singleton in (None, True, False):
        refcnt = ctypes.c_ssize_t.from_address(id(singleton))  # ob_refcnt is the first field of PyObject
        # getrefcount counts its own argument; allow for references taken by this very frame.
        if abs(refcnt.value - (sys.getrefcount(singleton) - 1)) > 8:
            return False  # not the layout we expect (a debug build): leave it alone
        refcnt.value += RESERVE
    _applied = True
    return True
