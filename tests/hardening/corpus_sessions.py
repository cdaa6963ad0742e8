"""Hostile session files (`--session`) and figure manifests (`export --from-manifest`): zip slip,
symlinked, duplicated and too many members, zip bombs, object-dtype arrays, wrong types, huge
numbers, deep JSON, newer versions, unknown views, a checkpoint path that is no checkpoint. Each is
refused in one line before anything is read or written beyond it, and the output the user
already had is left as it was; a valid session and manifest succeed."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from tests.hardening.cli_cases import CliCase
from tests.helpers.hardening import save_tiny
from tests.helpers.sessions import hostile_sessions

GROUPS = ("sessions", "manifests")
FIGURE = "transformer-viewer figure"


def _manifest(root: str, name: str, doc) -> str:
    path = os.path.join(root, f"{name}.manifest.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def build(root: str) -> list[CliCase]:
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.sessions import registry
    from transformer_viewer.model.sessions.checkpoint_part import record_of
    from transformer_viewer.model.sessions.figure_manifest import ExportRecord, manifest_text
    from transformer_viewer.model.sessions.prompt_part import PromptRecord

    os.makedirs(root, exist_ok=True)
    ckpt = save_tiny(os.path.join(root, "tiny.safetensors"))
    out = os.path.join(root, "users_figure.png")
    with open(out, "wb") as f:
        f.write(b"the user's own figure")
    cases = []
    for name, (data, expect) in sorted(hostile_sessions().items()):
        path = os.path.join(root, f"{name}.tvsession")
        with open(path, "wb") as f:
            f.write(data)
        cases.append(CliCase(f"session_{name}", "sessions", ("export", "--session", path, "--out", out),
                             expect.lower(), keep=(out,)))
    records = {"checkpoint": record_of(load_checkpoint(ckpt)), "prompt": PromptRecord("The cat sat on the mat")}
    good = registry.save(os.path.join(root, "good.tvsession"), records)
    cases.append(CliCase("session_valid", "sessions",
                         ("routes", "--session", good, "--out", os.path.join(root, "r.json")), None))
    moved = registry.save(os.path.join(root, "moved.tvsession"),
                          {**records, "checkpoint": replace(records["checkpoint"], source=os.path.join(root, "gone"))})
    cases.append(CliCase("session_missing_checkpoint", "sessions", ("attribute", "--session", moved),
                         "is not on this machine"))

    valid = json.loads(manifest_text({**records, "export": ExportRecord("attention", ".png")}))

    def variant(name: str, change) -> str:
        doc = json.loads(json.dumps(valid))
        change(doc)
        return _manifest(root, name, doc)

    def regenerate(path: str) -> tuple[str, ...]:
        return ("export", "--from-manifest", path, "--out", out)

    def set_export(key, value):
        return lambda d: d["parts"]["export"].__setitem__(key, value)

    not_a_checkpoint = os.path.join(root, "notes.txt")
    with open(not_a_checkpoint, "w") as f:
        f.write("not weights")
    manifests = [
        ("newer", variant("newer", lambda d: d.__setitem__("version", "3.0")), "written by a newer transformer-viewer"),
        ("other_format", variant("other", lambda d: d.__setitem__("format", "x")), "not a figure manifest"),
        ("wrong_type", variant("wrong_type", set_export("view", 5)), "export.view: is a number, not text"),
        ("huge_number", variant("huge", set_export("rows", 10 ** 60)), "export.rows: is"),
        ("non_finite", variant("nan", set_export("dpi", 1e400)), "manifest"),
        ("unknown_view", variant("view", set_export("view", "hologram")), "cannot be exported by this version"),
        ("no_export", variant("no_export", lambda d: d["parts"].pop("export")), "says nothing about the export"),
        ("deep", _manifest(root, "deep", "[" * 100000 + "]" * 100000), "nest"),
        ("not_json", _manifest(root, "not_json", "{'python': 'dict'}"), "manifest"),
        ("folder", root, "a folder, not a regular file"),
        ("not_a_checkpoint", variant("not_ckpt", lambda d: d["parts"]["checkpoint"].__setitem__(
            "source", not_a_checkpoint)), "notes.txt"),
    ]
    cases += [CliCase(f"manifest_{name}", "manifests", regenerate(path), expect.lower(), keep=(out,))
              for name, path, expect in manifests]
    good_manifest = _manifest(root, "good", valid)
    cases.append(CliCase("manifest_valid", "manifests", ("export", "--from-manifest", good_manifest, "--out",
                                                        os.path.join(root, "again.png")), None))
    return cases
