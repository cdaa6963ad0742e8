"""A session part's JSON object, read field by field with its type and bounds.

A session file is untrusted: every value a part takes from it goes through `Fields`, which
refuses a wrong type or a number out of range with one line naming the field, and notes the
keys it does not know (a newer version's additions) instead of failing on them.
"""

from __future__ import annotations

from transformer_viewer.model.errors import ModelError

MAX_TEXT_CHARS = 4096  # a path or a name; the prompt has its own, larger bound
MAX_ITEMS = 4096
FIX = "the file is damaged or was not written by transformer-viewer; save the session again"


def bad_field(where: str, problem: str) -> ModelError:
    """The one line for a field a session file gets wrong."""
    return ModelError(f"session {where}: {problem}; {FIX}")


class Fields:
    """The fields of the JSON object `obj` at `where` ("part selection"); `notes` hears of
    the keys nobody read once `finish()` is called."""

    def __init__(self, obj: object, where: str, notes: list[str]):
        if not isinstance(obj, dict):
            raise bad_field(where, f"is {_kind(obj)}, not an object")
        self.obj, self.where, self.notes = obj, where, notes
        self._read: set[str] = set()

    def _get(self, key: str, default, required: bool):
        self._read.add(key)
        if key not in self.obj or self.obj[key] is None:
            if required:
                raise bad_field(f"{self.where}.{key}", "is missing")
            return default, False
        return self.obj[key], True

    def text(self, key: str, default: str | None = None, max_chars: int = MAX_TEXT_CHARS,
             required: bool = False) -> str | None:
        value, given = self._get(key, default, required)
        if not given:
            return value
        if not isinstance(value, str):
            raise bad_field(f"{self.where}.{key}", f"is {_kind(value)}, not text")
        if len(value) > max_chars:
            raise bad_field(f"{self.where}.{key}", f"is {len(value):,} characters long, more than {max_chars:,}")
        if "\x00" in value:
            raise bad_field(f"{self.where}.{key}", "holds a NUL character")
        return value

    def integer(self, key: str, lo: int, hi: int, default: int | None = None, required: bool = False) -> int | None:
        value, given = self._get(key, default, required)
        if not given:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad_field(f"{self.where}.{key}", f"is {_kind(value)}, not a whole number")
        if not lo <= value <= hi:
            raise bad_field(f"{self.where}.{key}", f"is {_short(value)}, outside {lo}..{hi}")
        return value

    def number(self, key: str, lo: float, hi: float, default: float | None = None,
               required: bool = False) -> float | None:
        value, given = self._get(key, default, required)
        if not given:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad_field(f"{self.where}.{key}", f"is {_kind(value)}, not a number")
        if not lo <= value <= hi:  # untrusted_json already refused NaN and infinities
            raise bad_field(f"{self.where}.{key}", f"is {_short(value)}, outside {lo:g}..{hi:g}")
        return float(value)

    def flag(self, key: str, default: bool = False) -> bool:
        value, given = self._get(key, default, False)
        if given and not isinstance(value, bool):
            raise bad_field(f"{self.where}.{key}", f"is {_kind(value)}, not true or false")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None, required: bool = False):
        value = self.text(key, default, required=required)
        if value is not None and value not in choices:
            raise bad_field(f"{self.where}.{key}", f"is {value[:40]!r}, not one of {', '.join(choices)}")
        return value

    def pair(self, key: str, lo: int, hi: int, default=None, required: bool = False) -> tuple[int, int] | None:
        """[a, b], two whole numbers in lo..hi."""
        value, given = self._get(key, default, required)
        return int_pair(value, f"{self.where}.{key}", lo, hi) if given else value

    def span(self, key: str, lo: float, hi: float, default=None) -> tuple[float, float, float, float] | None:
        """[x0, x1, y0, y1], four numbers in lo..hi with x0 < x1 and y0 < y1: a rectangle."""
        value, given = self._get(key, default, False)
        if not given:
            return value
        if (not isinstance(value, list) or len(value) != 4
                or any(isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi for v in value)
                or not (value[0] < value[1] and value[2] < value[3])):
            raise bad_field(f"{self.where}.{key}", f"is {_short(value)}, not [x0, x1, y0, y1] with x0 < x1 and "
                                                   f"y0 < y1, each in {lo:g}..{hi:g}")
        return tuple(float(v) for v in value)

    def items(self, key: str, max_items: int = MAX_ITEMS) -> list:
        """A JSON array's elements (empty when absent), at most `max_items` of them."""
        value, given = self._get(key, [], False)
        if not given:
            return []
        if not isinstance(value, list):
            raise bad_field(f"{self.where}.{key}", f"is {_kind(value)}, not a list")
        if len(value) > max_items:
            raise bad_field(f"{self.where}.{key}", f"has {len(value):,} entries, more than {max_items:,}")
        return value

    def nested(self, key: str, required: bool = False) -> Fields | None:
        """The object under `key` as Fields of its own (None when absent)."""
        value, given = self._get(key, None, required)
        return Fields(value, f"{self.where}.{key}", self.notes) if given else None

    def finish(self) -> None:
        """Note each key no reader asked for: kept out of the session, never an error."""
        for key in sorted(k for k in self.obj if k not in self._read)[:8]:
            self.notes.append(f"{self.where}: ignored the unknown field {str(key)[:40]!r}")


def int_pair(value: object, where: str, lo: int, hi: int) -> tuple[int, int]:
    """[a, b], two whole numbers in lo..hi."""
    if (not isinstance(value, list) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi for v in value)):
        raise bad_field(where, f"is {_short(value)}, not a pair of whole numbers in {lo}..{hi}")
    return int(value[0]), int(value[1])


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true or false", int: "a number",
            float: "a number"}.get(type(value), "null" if value is None else type(value).__name__)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."
