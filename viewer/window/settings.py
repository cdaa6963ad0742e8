"""The app's settings, read as untrusted input.

QSettings hands back whatever its file holds: `recent_checkpoints=@Point(1 2)` comes back as a
QPoint, a lone entry as a string, a hand-edited or damaged file as a list of 100,000 entries or
one string of megabytes. Every value the app reads goes through `SettingsReader`, which checks
its type and bounds its count and lengths; a value that fails is reset (written back cleaned,
or removed) and the window says so once, in its status bar and as a log line, instead of
raising from a menu or building 100,000 menu entries. A file of megabytes (QSettings rewrites
it whole on every change) is cleared once, with the same kind of note.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

RECENT_KEY, RECENT_MAX = "recent_checkpoints", 10
RECENT_SESSIONS_KEY = "recent_sessions"
EXPORT_DIR_KEY = "export_dir"
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux; a longer "path" is no file's
# The settings file's size past which it is not the window's: ten paths and a folder take a few
# KiB. QSettings rewrites the whole file on each change, so a huge one would cost every open.
MAX_SETTINGS_BYTES = 1 << 20
NOTE_MS = 15000  # how long the status bar shows a note about a reset setting

log = logging.getLogger(__name__)


def _path_problem(value: object) -> str | None:
    """Why `value` is not a path or model name a setting may hold (None: it is one)."""
    if not isinstance(value, str):
        return f"a value of type {type(value).__name__}, not text"
    if not value.strip():
        return "empty"
    if len(value) > MAX_PATH_CHARS:
        return f"{len(value):,} characters long, more than a path has"
    if any(c in value for c in "\x00\n\r"):
        return "text with a NUL or a line break, which no path has"
    return None


class SettingsReader:
    """Typed, bounded reads (and the matching writes) of the settings the window keeps.

    `note(message)` hears of each value that was reset, in one line; the same line goes to the
    log. A bad value is noted once: it is reset when found, so the next read finds it clean.
    """

    def __init__(self, settings, note: Callable[[str], None] | None = None):
        self.settings = settings
        self.note = note
        self.notes: list[str] = []  # every reset so far (tests read it)
        self._check_file_size()

    def _check_file_size(self) -> None:
        try:  # a file on Linux; on macOS or Windows (plist, registry) there may be none to measure
            size = os.path.getsize(self.settings.fileName())
        except OSError:
            return
        if size > MAX_SETTINGS_BYTES:
            self.settings.clear()
            self._noted(f"settings: the file {self.settings.fileName()} was {size >> 20:,} MiB, not the few KiB the "
                        "window keeps there; reset")

    def _reset(self, key: str, message: str, cleaned=None) -> None:
        if cleaned is None:
            self.settings.remove(key)
        else:
            self.settings.setValue(key, cleaned)
        self._noted(f"settings: {key} {message}; reset")

    def _noted(self, line: str) -> None:
        self.notes.append(line)
        log.warning(line)
        if self.note is not None:
            self.note(line)

    # -- recent checkpoints ---------------------------------------------------------------
    def recent(self, key: str = RECENT_KEY) -> list[str]:
        """The recent checkpoints (or, by `key`, sessions), newest first: at most RECENT_MAX
        paths or model names."""
        value = self.settings.value(key, [])
        if value is None:  # a value QSettings could not read (an unknown @Variant type)
            if self.settings.contains(key):
                self._reset(key, "could not be read")
            return []
        if isinstance(value, str):
            value = [value] if value else []  # INI files give a lone entry back as a string
        if not isinstance(value, list):
            self._reset(key, f"was a value of type {type(value).__name__}, not a list of paths")
            return []
        kept, dropped = [], 0
        for item in value[: RECENT_MAX * 4]:  # never look at more than a few screens of a long list
            if _path_problem(item) is None and item not in kept:
                kept.append(item)
            else:
                dropped += 1
        if len(value) > RECENT_MAX or dropped:
            kept = kept[:RECENT_MAX]
            why = (f"had {len(value):,} entries, more than the {RECENT_MAX} kept" if len(value) > RECENT_MAX
                   else f"had {dropped} entr{'y' if dropped == 1 else 'ies'} that no path is")
            self._reset(key, why, kept)
        return kept

    def set_recent(self, items: list[str], key: str = RECENT_KEY) -> None:
        self.settings.setValue(key, [p for p in items if _path_problem(p) is None][:RECENT_MAX])

    def recent_sessions(self) -> list[str]:
        return self.recent(RECENT_SESSIONS_KEY)

    def set_recent_sessions(self, items: list[str]) -> None:
        self.set_recent(items, RECENT_SESSIONS_KEY)

    # -- the export folder ----------------------------------------------------------------
    def export_dir(self) -> str:
        """The folder the last export went to, while it still exists; else the working folder."""
        value = self.settings.value(EXPORT_DIR_KEY, None)
        if value is None:
            if self.settings.contains(EXPORT_DIR_KEY):
                self._reset(EXPORT_DIR_KEY, "could not be read")
            return os.getcwd()
        problem = _path_problem(value)
        if problem is not None:
            self._reset(EXPORT_DIR_KEY, f"was {problem}")
            return os.getcwd()
        return value if os.path.isdir(value) else os.getcwd()

    def set_export_dir(self, folder: str) -> None:
        if _path_problem(folder) is None:
            self.settings.setValue(EXPORT_DIR_KEY, folder)
