"""A damaged settings file: the window starts with it, loads and traces a model, and every bad
value it reads is reset with one note (status bar and log), never an exception from a menu.

Each case writes the INI file the window's QSettings reads (the way a hand edit, a crash mid-write
or another program would leave it), then opens the window on it."""

from __future__ import annotations

import pytest

from tests.helpers.hardening import UncaughtExceptions, new_window, one_line
from transformer_viewer.viewer.window.settings import (
    EXPORT_DIR_KEY,
    RECENT_KEY,
    RECENT_MAX,
    RECENT_SESSIONS_KEY,
)

MANY = 100_000
HUGE_CHARS = 512 << 10  # past any path, under the file-size bound (that case is its own)

FILE = "the file"  # the whole file is reset: it is far larger than the window's settings ever are

# name -> (INI lines under [General], what the window must reset: keys, or FILE)
CASES = {
    "recent_is_a_point": ("recent_checkpoints=@Point(1 2)", (RECENT_KEY,)),
    "recent_sessions_is_a_point": ("recent_sessions=@Point(1 2)", (RECENT_SESSIONS_KEY,)),
    "recent_sessions_has_5000_entries": ("recent_sessions=" + ", ".join(f"/s{i}.tvsession" for i in range(5000)),
                                         (RECENT_SESSIONS_KEY,)),
    "recent_is_a_size": ("recent_checkpoints=@Size(3 4)", (RECENT_KEY,)),
    "recent_is_an_int_variant": (r"recent_checkpoints=@Variant(\0\0\0\x2\0\0\0\0\x5)", (RECENT_KEY,)),
    "recent_is_an_unknown_variant": (r"recent_checkpoints=@Variant(\0\0\0\x7f\0\0\0\x5QFont)", (RECENT_KEY,)),
    "recent_has_100000_entries": ("recent_checkpoints=" + ", ".join(f"/nowhere/model{i}.safetensors"
                                                                   for i in range(MANY)), (FILE,)),
    "recent_has_5000_entries": ("recent_checkpoints=" + ", ".join(f"/m{i}" for i in range(5000)), (RECENT_KEY,)),
    "recent_is_one_huge_string": ("recent_checkpoints=" + "a" * HUGE_CHARS, (RECENT_KEY,)),
    "recent_mixes_points_and_paths": ("recent_checkpoints=/nowhere/a.safetensors, @Point(1 2), @Rect(1 2 3 4)",
                                      (RECENT_KEY,)),
    "recent_has_a_nul": (r'recent_checkpoints="/nowhere/a\0b.safetensors"', (RECENT_KEY,)),
    "export_dir_is_a_rect": ("export_dir=@Rect(1 2 3 4)", (EXPORT_DIR_KEY,)),
    "export_dir_is_bytes": (r"export_dir=@ByteArray(\xff\xfe\0)", (EXPORT_DIR_KEY,)),
    "export_dir_is_a_map_variant": (r"export_dir=@Variant(\0\0\0\x1c\0\xff\xff\xff\xff)", (EXPORT_DIR_KEY,)),
    "export_dir_is_huge": ("export_dir=/" + "d" * HUGE_CHARS, (EXPORT_DIR_KEY,)),
    # Keys the window does not read (a window geometry and dock state of another version):
    # junk there must not stop it either.
    "junk_geometry_and_state": (r"geometry=@ByteArray(\x1\xd9\xd0\xcb\0\x3\0\0\xff\xff)" "\n"
                                r"windowState=@Variant(\0\0\0\x7f\0\0\0\x5QFont)" "\n"
                                "state=@Point(99999999 99999999)", ()),
}


def write_ini(path, body: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("[General]\n" + body + "\n")


@pytest.mark.parametrize("name", list(CASES))
def test_the_window_starts_works_and_resets_each_bad_setting(qtbot, tmp_path, tiny_ckpt, dialogs, name):
    body, bad_keys = CASES[name]
    write_ini(tmp_path / "settings.ini", body)
    with UncaughtExceptions() as caught:
        window = new_window(qtbot, tmp_path, tiny_ckpt)
        assert window.state.trace is not None and window.last_error is None
        window.actions_.export_dialog("heatmap", ".npy")  # reads the export folder (the dialog is cancelled)
        notes = window.app_settings.notes
        for key in bad_keys:
            assert any(note.startswith(f"settings: {key} ") for note in notes), notes
        assert len(notes) == len(bad_keys), notes  # each bad value noted once, nothing else
        assert all(one_line(n) and len(n) < 200 for n in notes)
        # What the window keeps now is clean: a short list of paths, the model just opened first.
        recent = window.settings.value(RECENT_KEY)
        recent = [recent] if isinstance(recent, str) else recent
        assert isinstance(recent, list) and 1 <= len(recent) <= RECENT_MAX
        assert all(isinstance(p, str) and len(p) < 4096 for p in recent)
        assert recent[0].endswith("tiny.safetensors")
        assert len(window.actions_.recent_menu.actions()) <= RECENT_MAX + 2  # entries, a separator, Clear
        export_dir = window.settings.value(EXPORT_DIR_KEY)
        assert export_dir is None or (isinstance(export_dir, str) and len(export_dir) < 4096)
        window.close()
    assert not caught.errors, caught.errors[0]
    # The next start reads the cleaned file and has nothing to say.
    again = new_window(qtbot, tmp_path, None, prompt=None)
    assert again.app_settings.recent()[0].endswith("tiny.safetensors")
    again.app_settings.export_dir()
    assert again.app_settings.notes == []
    again.close()


def test_a_settings_file_of_megabytes_is_cleared_once(qtbot, tmp_path, tiny_ckpt, dialogs):
    """A file far larger than anything the window writes (here: 2 MiB under a key it never reads)
    would be rewritten on every change: it is cleared at start, with one note, and then works."""
    write_ini(tmp_path / "settings.ini", "padding=" + "x" * (2 << 20) + "\nexport_dir=/tmp")
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    assert window.state.trace is not None
    notes = window.app_settings.notes
    assert len(notes) == 1 and "was 2 MiB" in notes[0] and one_line(notes[0])
    assert window.settings.value("padding") is None
    window.settings.sync()
    assert (tmp_path / "settings.ini").stat().st_size < 10_000
    window.close()


def test_a_lone_recent_entry_and_a_missing_export_folder_are_not_damage(qtbot, tmp_path, dialogs):
    """INI gives a one-entry list back as a string, and a folder exported to may since have gone:
    both are read as they are, with no note."""
    write_ini(tmp_path / "settings.ini", f"recent_checkpoints=/nowhere/a.safetensors\nexport_dir={tmp_path}/gone")
    window = new_window(qtbot, tmp_path, None, prompt=None)
    assert window.app_settings.recent() == ["/nowhere/a.safetensors"]
    assert window.app_settings.export_dir() != f"{tmp_path}/gone"
    assert window.app_settings.notes == []
    window.close()


def test_a_note_is_shown_in_the_status_bar(qtbot, tmp_path, dialogs):
    write_ini(tmp_path / "settings.ini", "recent_checkpoints=@Point(1 2)")
    window = new_window(qtbot, tmp_path, None, prompt=None)
    assert window.statusBar().currentMessage() == window.app_settings.notes[0]
    assert "recent_checkpoints" in window.app_settings.notes[0] and "reset" in window.app_settings.notes[0]
    window.close()
