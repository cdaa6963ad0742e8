"""Every part a session holds, in one table, and the session as a whole in and out of its file.

A feature that adds state adds one module with its `Part` (a frozen record, `to_json`,
`from_json` through `Fields`) and one line here; the window binds it in
viewer/window/session_binding.py. A session is a dict {part name: record}; a part left out
(nothing to say) is simply absent.
"""

from __future__ import annotations

from transformer_viewer.model.sessions import (
    checkpoint_part,
    environment_part,
    figures_part,
    patching_part,
    prompt_part,
    view_parts,
)
from transformer_viewer.model.sessions.container import (
    SessionFile,
    read_session,
    session_bytes,
    write_session,
)
from transformer_viewer.model.sessions.fields import Fields
from transformer_viewer.model.sessions.parts import Part

PARTS: dict[str, Part] = {p.name: p for p in (
    checkpoint_part.PART,
    prompt_part.PROMPT,
    prompt_part.INTERVENTION,
    view_parts.SELECTION,
    view_parts.VIEWS,
    view_parts.WINDOW,
    environment_part.PART,
    figures_part.PART,
    patching_part.PART,
)}


def encode(records: dict[str, object], table: dict[str, Part] | None = None) -> dict[str, object]:
    """The manifest's "parts": each record as its part writes it, with the part's version."""
    table = PARTS if table is None else table
    return {name: {"version": table[name].version, **table[name].to_json(record)} for name, record in records.items()}


def decode(parts: dict[str, object], notes: list[str], table: dict[str, Part] | None = None) -> dict[str, object]:
    """The records of a manifest's "parts", each field checked (ModelError on the first bad one);
    a part this version does not know, or knows in an older version only, is skipped with a note."""
    records = {}
    table = PARTS if table is None else table
    for name in list(parts)[:64]:
        part = table.get(name)
        if part is None:
            notes.append(f"ignored the part {str(name)[:40]!r}, which this version does not know")
            continue
        f = Fields(parts[name], f"part {name}", notes)
        version = f.integer("version", 1, 1 << 20, 1)
        if version > part.version:
            notes.append(f"ignored the part {name!r} of version {version}: this transformer-viewer reads up to "
                         f"{part.version}")
            continue
        records[name] = part.from_json(f)
        f.finish()
    return records


def save(path: str, records: dict[str, object], arrays=None) -> str:
    """Write `records` (and optional arrays) as a .tvsession file, atomically."""
    return write_session(path, encode(records), arrays)


def saved_size(records: dict[str, object], arrays=None) -> int:
    """The bytes the file would take (shown before saving with arrays)."""
    return len(session_bytes(encode(records), arrays))


def load(path: str) -> tuple[dict[str, object], dict, list[str]]:
    """(records, arrays, notes) of the session at `path`; ModelError for anything refused."""
    stored: SessionFile = read_session(path)
    notes: list[str] = []
    return decode(stored.parts, notes), stored.arrays, notes
