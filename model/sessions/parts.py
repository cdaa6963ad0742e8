"""A session part: one named, versioned piece of a saved session, with its own writer and its
validating reader.

`to_json(value) -> dict` writes the part's value as a JSON object; `from_json(fields) -> value`
reads it back from a `Fields` of that object, checking every field (fields.py). A part's
`version` grows when its fields change meaning; a reader skips a part of a newer version with
a note, keeping the others. Which parts a session has is one table, registry.py's `PARTS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformer_viewer.model.sessions.fields import Fields


@dataclass(frozen=True)
class Part:
    name: str  # the key in the manifest's "parts"
    version: int
    to_json: Callable[[Any], dict]
    from_json: Callable[[Fields], Any]
