"""Redraws that wait while a view is out of sight.

A new trace makes every subscribed view redraw in one turn of the GUI thread's event loop. At
long prompts a hidden tab's redraw (the residual view's pooled norms, the attention diff) costs
tens of milliseconds the user cannot see, added to the stall of the views they can. A view
mixing in `RefreshWhenShown` and marking its `refresh` with `@when_shown` skips a redraw while
it is hidden inside a shown window (a tab behind another, a closed dock) and draws once, with
what the state then holds, when it is next shown. A widget outside any shown window (the
export command, a test) draws at once, as before. Whatever reads a view's drawing while it may
be hidden (File > Export of a closed dock or a tab behind another) calls `catch_up()` first.
"""

from __future__ import annotations

import functools


def out_of_sight(widget) -> bool:
    """True for a widget hidden inside a window that is on screen (a floating dock, a window of
    its own, counts as inside the window it floats over)."""
    top = widget
    while top.parentWidget() is not None:
        top = top.parentWidget()
    return not widget.isVisible() and top.isVisible()


def when_shown(refresh):
    """Wrap a view's `refresh(*args)`: while the view is out of sight, remember that it is stale."""

    @functools.wraps(refresh)
    def wrapper(self, *args):
        if out_of_sight(self):
            self._refresh_waiting = True
            return None
        self._refresh_waiting = False
        return refresh(self, *args)

    return wrapper


class RefreshWhenShown:
    """Mixin (before the Qt class) that runs a refresh skipped while hidden when the view is shown."""

    _refresh_waiting = False

    def showEvent(self, event) -> None:  # noqa: N802 - Qt name
        super().showEvent(event)
        self.catch_up()

    def catch_up(self) -> None:
        """Run the refresh skipped while hidden, now (before something reads the drawing)."""
        if self._refresh_waiting:
            self._refresh_waiting = False
            refresh = type(self).refresh
            getattr(refresh, "__wrapped__", refresh)(self)  # past `when_shown`: it may still be hidden
