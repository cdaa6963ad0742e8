"""The launch check for Qt's xcb libraries: a missing library gives one line naming its package
and exit 2 before any QApplication exists; other platforms and Wayland are left alone."""

from __future__ import annotations

import ctypes

import pytest

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer import platform_check
from transformer_viewer.viewer.cli.main import main

X11 = {"XDG_SESSION_TYPE": "x11", "DISPLAY": ":0"}


def fake_loader(missing: set[str]):
    def loads(soname: str) -> bool:
        return soname not in missing
    return loads


def test_missing_library_names_its_package():
    loads = fake_loader({"libxcb-cursor.so.0", "libxcb-keysyms.so.1"})
    with pytest.raises(ModelError) as e:
        platform_check.check_qt_platform(X11, "linux", loads)
    msg = str(e.value)
    assert "sudo apt install libxcb-cursor0 libxcb-keysyms1`" in msg
    assert "QT_QPA_PLATFORM=wayland" in msg and "\n" not in msg
    assert "libxcb-icccm4" not in msg  # only what is missing


def test_nothing_missing_or_not_xcb_passes():
    platform_check.check_qt_platform(X11, "linux", fake_loader(set()))
    everything = set(platform_check.XCB_LIBRARIES)
    for env, plat in [(X11, "darwin"), (X11, "win32"), ({"QT_QPA_PLATFORM": "wayland"}, "linux"),
                      ({"QT_QPA_PLATFORM": "offscreen"}, "linux"), ({"XDG_SESSION_TYPE": "wayland"}, "linux")]:
        platform_check.check_qt_platform(env, plat, fake_loader(everything))
    with pytest.raises(ModelError):  # xcb asked for by name, even in a Wayland session
        platform_check.check_qt_platform({"QT_QPA_PLATFORM": "xcb", "XDG_SESSION_TYPE": "wayland"}, "linux",
                                         fake_loader({"libxcb-icccm.so.4"}))


def test_real_loader_reports_a_library_that_does_not_exist(monkeypatch):
    assert not platform_check._loads("libtv-does-not-exist.so.7")
    monkeypatch.setitem(platform_check.XCB_LIBRARIES, "libtv-does-not-exist.so.7", "libtv-missing7")
    assert "libtv-does-not-exist.so.7" in platform_check.missing_xcb_libraries()


def test_window_launch_exits_2_with_one_line(monkeypatch, capsys):
    """The whole launch path: the check stops it before the model loads or a window is built."""
    created = []
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    real_cdll = ctypes.CDLL

    def cdll(name, *a, **kw):
        if name == "libxcb-cursor.so.0":
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        return real_cdll(name, *a, **kw)

    monkeypatch.setattr(platform_check.ctypes, "CDLL", cdll)
    monkeypatch.setattr("sys.platform", "linux")
    from transformer_viewer.viewer.worker import client as worker

    monkeypatch.setattr(worker, "WorkerClient", lambda *a: created.append(a))  # would start loading the model
    assert main(["--prompt", "hi"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "libxcb-cursor0" in err[0]
    assert created == []


@pytest.mark.parametrize("env", [{}, {"XDG_SESSION_TYPE": "x11"}, {"DISPLAY": " "}])
def test_no_display_is_one_line_saying_how_to_get_one(env):
    with pytest.raises(ModelError) as e:
        platform_check.check_display(env, "linux")
    msg = str(e.value)
    assert "\n" not in msg and "no display" in msg
    assert "ssh -X" in msg and "Xvfb" in msg and "--screenshot" in msg and "export" in msg


@pytest.mark.parametrize("env, plat", [({"DISPLAY": ":0"}, "linux"), ({"WAYLAND_DISPLAY": "wayland-0"}, "linux"),
                                       ({"QT_QPA_PLATFORM": "offscreen"}, "linux"), ({"QT_QPA_PLATFORM": "vnc"}, "linux"),
                                       ({}, "darwin"), ({}, "win32")])
def test_a_display_or_a_chosen_platform_passes(env, plat):
    platform_check.check_display(env, plat)


def headless_env() -> dict:
    """This environment as on a machine reached over SSH without X forwarding."""
    import os

    gone = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE")
    return {k: v for k, v in os.environ.items() if k not in gone}


@pytest.mark.parametrize("argv", [["--prompt", "hi"], ["no-such-model.safetensors"], ["xyzzy"]])
def test_the_window_on_a_headless_machine_exits_2_with_the_line(argv):
    """The real launch, in a fresh process: Qt is never reached, so it cannot abort (exit 134)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "transformer_viewer.viewer.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, env=headless_env())
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"error: {platform_check.NO_DISPLAY}"


def test_a_screenshot_needs_no_display(tiny_ckpt, tmp_path):
    import subprocess
    import sys

    from PySide6.QtGui import QImage

    out = tmp_path / "shot.png"
    done = subprocess.run([sys.executable, "-m", "transformer_viewer.viewer.cli.main", tiny_ckpt, "--device", "cpu",
                           "--prompt", "The cat sat", "--screenshot", str(out)],
                          capture_output=True, text=True, timeout=300, env=headless_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert not QImage(str(out)).isNull()
