"""Hostile session files (`--session`) and figure manifests (`export --from-manifest`): zip slip,
symlinked, duplicated and too many members, zip bombs, object-dtype arrays, wrong types, huge
numbers, deep JSON, newer versions, unknown views, a checkpoint path that is no checkpoint, clamps
and SAEs out of bounds, an SAE path that is gone or is no SAE. Each is
refused in one line before anything is read or written beyond it, and the output the user
already had is left as it was; a valid session and manifest succeed."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from tests.hardening.cli_cases import CliCase
from tests.helpers.hardening import TINY, save_tiny
from tests.helpers.sessions import hostile_sessions

GROUPS = ("sessions", "manifests")
PATCH_CORRUPTED = "The cat sat on the rug"  # the valid patching manifest's corrupted prompt, as long as its clean one
FIGURE = "transformer-viewer figure"


def _manifest(root: str, name: str, doc) -> str:
    path = os.path.join(root, f"{name}.manifest.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def not_a_checkpoint_file(root: str) -> str:
    path = os.path.join(root, "notes.txt")
    with open(path, "w") as f:
        f.write("not weights")
    return path


def _sae_record(root: str):
    """The record of a small SAE for the tiny model, written under `root`."""
    from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
    from transformer_viewer.model.sessions.fingerprint import sae_fingerprint
    from transformer_viewer.model.sessions.saes_part import SaeRecord

    hook = "blocks.0.hook_resid_post"
    # model_from_pretrained_kwargs said (none: an unprocessed model), so a load prints no note before its one line
    folder = write_saelens(os.path.join(root, "sae"), saelens_cfg("standard", TINY.n_embd, 16, hook,
                                                                  model_from_pretrained_kwargs={}),
                           random_weights("standard", TINY.n_embd, 16, seed=1))
    return SaeRecord(0, folder, hook, TINY.n_embd, 16, sae_fingerprint(folder))


def build(root: str) -> list[CliCase]:
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.sessions import registry
    from transformer_viewer.model.sessions.checkpoint_part import record_of
    from transformer_viewer.model.sessions.figure_manifest import ExportRecord, manifest_text
    from transformer_viewer.model.sessions.patching_part import PatchingRecord
    from transformer_viewer.model.sessions.prompt_part import PromptRecord
    from transformer_viewer.model.sessions.saes_part import SaesRecord

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

    sae = _sae_record(root)
    for name, spec, expect in (("gone", os.path.join(root, "gone_sae"), "is not on this machine"),
                               ("not_an_sae", not_a_checkpoint_file(root), "not an sae file"),
                               ("system_file", "/etc/passwd", "not an sae file")):
        path = registry.save(os.path.join(root, f"sae_{name}.tvsession"),
                             {**records, "saes": SaesRecord((replace(sae, spec=spec),))})
        cases.append(CliCase(f"session_sae_{name}", "sessions", ("predict", "--session", path), expect))
    ok = registry.save(os.path.join(root, "sae_ok.tvsession"), {**records, "saes": SaesRecord((sae,))})
    cases.append(CliCase("session_sae_valid", "sessions", ("features", "--session", ok, "--json"), None))

    valid = json.loads(manifest_text({**records, "export": ExportRecord("attention", ".png")}))

    def variant(name: str, change) -> str:
        doc = json.loads(json.dumps(valid))
        change(doc)
        return _manifest(root, name, doc)

    def regenerate(path: str) -> tuple[str, ...]:
        return ("export", "--from-manifest", path, "--out", out)

    def set_export(key, value):
        return lambda d: d["parts"]["export"].__setitem__(key, value)

    not_a_checkpoint = not_a_checkpoint_file(root)
    manifests = [
        ("newer", variant("newer", lambda d: d.__setitem__("version", "3.0")), "written by a newer transformer-viewer"),
        ("other_format", variant("other", lambda d: d.__setitem__("format", "x")), "not a figure manifest"),
        ("wrong_type", variant("wrong_type", set_export("view", 5)), "export.view: is a number, not text"),
        ("huge_number", variant("huge", set_export("rows", 10 ** 60)), "export.rows: is"),
        ("non_finite", variant("nan", set_export("dpi", 1e400)), "manifest"),
        ("unknown_view", variant("view", set_export("view", "hologram")), "cannot be exported by this version"),
        ("region_inverted", variant("region_inv", set_export("region", [3, 1, 0, 2])), "export.region: is [3, 1, 0, 2]"),
        ("region_short", variant("region_short", set_export("region", [0, 1])), "not [x0, x1, y0, y1]"),
        ("region_huge", variant("region_huge", set_export("region", [0, 1e30, 0, 1])), "each in 0..1.67772e+07"),
        ("region_text", variant("region_text", set_export("region", ["0", "1", "0", "1"])), "not [x0, x1, y0, y1]"),
        ("region_outside", variant("region_out", set_export("region", [0, 4096, 0, 1])), "is outside the heatmap's"),
        ("no_export", variant("no_export", lambda d: d["parts"].pop("export")), "says nothing about the export"),
        ("deep", _manifest(root, "deep", "[" * 100000 + "]" * 100000), "nest"),
        ("not_json", _manifest(root, "not_json", "{'python': 'dict'}"), "manifest"),
        ("folder", root, "a folder, not a regular file"),
        ("not_a_checkpoint", variant("not_ckpt", lambda d: d["parts"]["checkpoint"].__setitem__(
            "source", not_a_checkpoint)), "notes.txt"),
    ]
    manifests += _sae_manifests(root, {**records, "export": ExportRecord("attention", ".png")}, sae, not_a_checkpoint)
    patching = json.loads(manifest_text({**records, "export": ExportRecord("patching", ".npy"),
                                         "patching": PatchingRecord(comparing=True, corrupted=PATCH_CORRUPTED,
                                                                    metric="kl", what="heads")}))

    def patching_variant(name: str, key: str, value) -> str:
        doc = json.loads(json.dumps(patching))
        doc["parts"]["patching"][key] = value
        return _manifest(root, f"patching_{name}", doc)

    manifests += [
        ("patching_metric", patching_variant("metric", "metric", "vibes"), "patching.metric: is 'vibes', not one of"),
        ("patching_what", patching_variant("what", "what", "everything"), "patching.what: is 'everything'"),
        ("patching_token", patching_variant("token", "tokens", [-1]), "patching.tokens[0]: is not a token id"),
        ("patching_tokens_many", patching_variant("tokens_many", "tokens", list(range(10 ** 5))), "patching.tokens"),
        ("patching_receiver", patching_variant("receiver", "receiver", [10 ** 12, 0]), "patching.receiver"),
        ("patching_corrupted_nul", patching_variant("nul", "corrupted", "a\x00b"), "holds a nul character"),
        ("patching_corrupted_huge", patching_variant("huge", "corrupted", "x" * (1 << 21)), "patching.corrupted"),
        ("patching_pairs", patching_variant("pairs", "pairs", [["only one"]]), "patching.pairs[0]: is not a pair"),
        ("patching_position", patching_variant("position", "position", -5), "patching.position"),
        ("patching_missing", variant("patching_missing", lambda d: d["parts"]["export"].__setitem__("view", "patching")),
         "without its `patching` part"),
    ]
    cases += [CliCase(f"manifest_{name}", "manifests", regenerate(path), expect.lower(), keep=(out,))
              for name, path, expect in manifests]
    good_manifest = _manifest(root, "good", valid)
    cases.append(CliCase("manifest_valid", "manifests", ("export", "--from-manifest", good_manifest, "--out",
                                                        os.path.join(root, "again.png")), None))
    cases.append(CliCase("manifest_patching_valid", "manifests", ("export", "--from-manifest", _manifest(
        root, "good_patching", patching), "--out", os.path.join(root, "again_patching.npy")), None))
    good_sae_manifest = _manifest(root, "good_sae", _sae_manifest({**records, "export": ExportRecord("attention", ".png")},
                                                                  sae))
    cases.append(CliCase("manifest_sae_valid", "manifests", ("export", "--from-manifest", good_sae_manifest, "--out",
                                                            os.path.join(root, "again_sae.png")), None))
    return cases


def _sae_manifest(records: dict, sae) -> dict:
    """A manifest of a figure exported with `sae` open and one of its features clamped."""
    from transformer_viewer.model.capture.interventions import FeatureClamp
    from transformer_viewer.model.sessions.figure_manifest import manifest_text
    from transformer_viewer.model.sessions.prompt_part import InterventionRecord
    from transformer_viewer.model.sessions.saes_part import SaesRecord

    clamped = InterventionRecord(TINY.n_layer, TINY.n_head, (), "zero", (FeatureClamp(0, 3, "set", 2.0),))
    return json.loads(manifest_text({**records, "intervention": clamped, "saes": SaesRecord((sae,))}))


def _sae_manifests(root: str, records: dict, sae, not_an_sae: str) -> list[tuple[str, str, str]]:
    """(name, manifest, expected fragment): a manifest's SAE fields made hostile, each refused in
    one line before the figure is written; its path untrusted as a typed --sae is."""
    valid = _sae_manifest(records, sae)

    def variant(name: str, change) -> str:
        doc = json.loads(json.dumps(valid))
        change(doc)
        return _manifest(root, f"sae_{name}", doc)

    def set_sae(key, value):
        return lambda d: d["parts"]["saes"]["saes"][0].__setitem__(key, value)

    def set_clamp(key, value):
        return lambda d: d["parts"]["intervention"]["clamps"][0].__setitem__(key, value)

    return [
        ("sae_gone", variant("gone", set_sae("spec", os.path.join(root, "gone_sae"))), "is not on this machine"),
        ("sae_not_an_sae", variant("not_an_sae", set_sae("spec", not_an_sae)), "not an sae file"),
        ("sae_system_file", variant("system_file", set_sae("spec", "/etc/passwd")), "not an sae file"),
        ("sae_width_huge", variant("width_huge", set_sae("d_sae", 10 ** 12)), "saes.saes[0].d_sae: is"),
        ("sae_hook_long", variant("hook_long", set_sae("hook", "blocks." * 1000)), "characters long"),
        ("sae_fingerprint_method", variant("fingerprint", set_sae("fingerprint", {"method": "trust-me"})),
         "fingerprint.method: is 'trust-me'"),
        ("sae_index_twice", variant("index_twice", lambda d: d["parts"]["saes"]["saes"].append(
            d["parts"]["saes"]["saes"][0])), "which another sae of the session has"),
        ("sae_private_no_path", variant("private", _private_without_paths),
         "is private and leaves the paths of its saes out"),
        ("sae_clamp_past_width", variant("clamp_feature", set_clamp("feature", 4000)), "sae 0 has features 0..15"),
        ("sae_clamp_value_huge", variant("clamp_value", set_clamp("value", 1e300)), "clamps[0].value: is 1e+300"),
    ]


def _private_without_paths(doc: dict) -> None:
    """What `--manifest-private` writes: the SAE's folder named, its path left out."""
    doc["private"] = True
    doc["parts"]["export"]["private"] = True
    doc["parts"]["saes"]["saes"][0]["spec"] = "a-private-sae-folder"
