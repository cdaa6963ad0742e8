"""Before the window opens on Linux: is there a display, and are the system libraries Qt's X11
(xcb) plugin needs there?

Without a display (over SSH without X forwarding, in a container) Qt's xcb plugin fails to
connect and aborts the process with a message about missing libraries that are in fact
installed; `check_display` says what is wrong and what to do instead, in one line.

Qt 6.5+ loads `libxcb-cursor.so.0` and a dozen other xcb libraries from the system, not from
the PySide6 wheel. A fresh Debian/Ubuntu desktop lacks some of them (`libxcb-cursor0`,
`libxcb-icccm4`, `libxcb-keysyms1`, ...), and Qt then aborts the process (SIGABRT, core dump)
after a message about "the Qt platform plugin xcb". Trying to load each library first lets us
name the packages to install, in one line, and exit 2 instead. macOS and Windows need nothing:
their wheels carry everything their platform plugins load.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

from transformer_viewer.model.errors import ModelError

# The libraries Qt's xcb platform plugin (libqxcb.so and libQt6XcbQpa.so.6 of PySide6 6.x) links
# from the system, by soname, with the Debian/Ubuntu package that holds each.
XCB_LIBRARIES = {
    "libxcb.so.1": "libxcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libX11.so.6": "libx11-6",
    "libX11-xcb.so.1": "libx11-xcb1",
}


def _loads(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def uses_xcb(environ=os.environ, platform: str = sys.platform) -> bool:
    """Whether Qt will pick its xcb plugin: Linux, and QT_QPA_PLATFORM names xcb first or is
    unset outside a Wayland session (where Qt picks its own Wayland plugin)."""
    if not platform.startswith("linux"):
        return False
    chosen = environ.get("QT_QPA_PLATFORM", "").strip().lower()
    if chosen:
        return chosen.startswith("xcb")
    return environ.get("XDG_SESSION_TYPE", "").lower() != "wayland"


def missing_xcb_libraries(loads: Callable[[str], bool] = _loads) -> list[str]:
    """The sonames of XCB_LIBRARIES that the dynamic loader cannot find."""
    return [soname for soname in XCB_LIBRARIES if not loads(soname)]


def check_qt_platform(environ=os.environ, platform: str = sys.platform,
                      loads: Callable[[str], bool] = _loads) -> None:
    """Raise a one-line ModelError naming the packages to install when Qt would use xcb and some
    of its libraries are missing; call before the QApplication exists."""
    if not uses_xcb(environ, platform):
        return
    missing = missing_xcb_libraries(loads)
    if not missing:
        return
    packages = " ".join(XCB_LIBRARIES[soname] for soname in missing)
    raise ModelError(f"Qt's X11 plugin needs system libraries that are missing ({', '.join(missing)}): "
                     f"install them with `sudo apt install {packages}` (Debian/Ubuntu), "
                     f"or on a Wayland desktop run with QT_QPA_PLATFORM=wayland")


NO_DISPLAY = ("no display to open the window on (neither DISPLAY nor WAYLAND_DISPLAY is set): connect with "
              "`ssh -X` (X forwarding), or start a virtual display (`Xvfb :99 & export DISPLAY=:99`); "
              "without one, `--screenshot FILE.png`, `export` and the other commands work")


def check_display(environ=os.environ, platform: str = sys.platform) -> None:
    """Raise a one-line ModelError when Qt would look for a display on Linux and there is none.
    A QT_QPA_PLATFORM the user set (offscreen, wayland, vnc, ...) is theirs: nothing is checked."""
    if not platform.startswith("linux") or environ.get("QT_QPA_PLATFORM", "").strip():
        return
    if environ.get("DISPLAY", "").strip() or environ.get("WAYLAND_DISPLAY", "").strip():
        return
    raise ModelError(NO_DISPLAY)
