"""The `figures` part: the figures and data exported while the session was open, each with the
manifest that regenerates it (figure_manifest.py), so a saved session lists its figures."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_viewer.model.sessions.fields import Fields
from transformer_viewer.model.sessions.parts import Part

MAX_FIGURES = 512


@dataclass(frozen=True)
class FigureRecord:
    path: str  # the file written
    view: str  # the view id
    manifest: str | None = None  # its FILE.manifest.json, when one was written


def _to_json(figures: tuple[FigureRecord, ...]) -> dict:
    return {"exported": [{"path": r.path, "view": r.view, "manifest": r.manifest} for r in figures]}


def _from_json(f: Fields) -> tuple[FigureRecord, ...]:
    out = []
    for i, item in enumerate(f.items("exported", MAX_FIGURES)):
        g = Fields(item, f"{f.where}.exported[{i}]", f.notes)
        out.append(FigureRecord(g.text("path", required=True), g.text("view", "", max_chars=40), g.text("manifest")))
        g.finish()
    return tuple(out)


PART = Part("figures", 1, _to_json, _from_json)
