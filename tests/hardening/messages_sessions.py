"""Message triggers for saved sessions, figure manifests and `--session`."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np

from tests.hardening.message_case import Case, raised
from tests.helpers.sessions import hostile_sessions, manifest_doc, zip_of


def _load(ctx, name):
    from transformer_viewer.model.sessions import registry

    data, _expect = hostile_sessions()[name]
    path = ctx.tmp / f"{name}.tvsession"
    path.write_bytes(data)
    return raised(lambda: registry.load(str(path)))


def _parts(ctx, parts):
    from transformer_viewer.model.sessions import registry

    path = ctx.tmp / "parts.tvsession"
    path.write_bytes(zip_of([("manifest.json", manifest_doc(parts))]))
    return raised(lambda: registry.load(str(path)))


def _too_many_arrays(ctx):
    from transformer_viewer.model.sessions import registry

    return raised(lambda: registry.save(str(ctx.tmp / "s.tvsession"), {}, {f"a{i}": np.zeros(1) for i in range(17)}))


def _bad_array_name(ctx):
    from transformer_viewer.model.sessions import registry

    return raised(lambda: registry.save(str(ctx.tmp / "s.tvsession"), {}, {"../up": np.zeros(1)}))


def _session_of(ctx, **change):
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.sessions import registry
    from transformer_viewer.model.sessions.checkpoint_part import record_of
    from transformer_viewer.model.sessions.prompt_part import PromptRecord

    ckpt = replace(record_of(load_checkpoint(ctx.ckpt)), **change)
    return registry.save(str(ctx.tmp / "c.tvsession"), {"checkpoint": ckpt, "prompt": PromptRecord("The cat sat")})


def _session_with_sae(ctx, spec: str):
    """`features --session` on a session of the tiny model that opened one SAE from `spec`."""
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.sessions import registry
    from transformer_viewer.model.sessions.checkpoint_part import record_of
    from transformer_viewer.model.sessions.fingerprint import SAMPLED, Fingerprint
    from transformer_viewer.model.sessions.prompt_part import PromptRecord
    from transformer_viewer.model.sessions.saes_part import SaeRecord, SaesRecord

    loaded = load_checkpoint(ctx.ckpt)
    sae = SaeRecord(0, spec, "blocks.0.hook_resid_post", loaded.config.n_embd, 16, Fingerprint(SAMPLED, "", 0))
    path = registry.save(str(ctx.tmp / "sae.tvsession"), {"checkpoint": record_of(loaded),
                                                         "prompt": PromptRecord("The cat sat"),
                                                         "saes": SaesRecord((sae,))})
    return ctx.cli("features", "--session", path)


def _manifest(ctx, change):
    from transformer_viewer.model.sessions.figure_manifest import ExportRecord, manifest_text
    from transformer_viewer.model.sessions.prompt_part import PromptRecord

    doc = json.loads(manifest_text({"prompt": PromptRecord("The cat sat"), "export": ExportRecord("attention", ".png")}))
    change(doc)
    path = ctx.tmp / "m.manifest.json"
    path.write_text(json.dumps(doc))
    return ctx.cli("export", "--from-manifest", str(path), "--out", str(ctx.tmp / "m.png"))


def _sae_manifest(ctx, *extra, spec: str | None = "", private: bool = False):
    """`export --from-manifest` (with `extra`) of a manifest that opened one SAE of the tiny
    model from `spec` ("": a folder written here; None: none at all)."""
    from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.sessions.checkpoint_part import record_of
    from transformer_viewer.model.sessions.figure_manifest import ExportRecord, manifest_text
    from transformer_viewer.model.sessions.fingerprint import sae_fingerprint
    from transformer_viewer.model.sessions.prompt_part import PromptRecord
    from transformer_viewer.model.sessions.saes_part import SaeRecord, SaesRecord

    loaded, hook = load_checkpoint(ctx.ckpt), "blocks.0.hook_resid_post"
    folder = write_saelens(ctx.tmp / "sae", saelens_cfg("standard", loaded.config.n_embd, 16, hook),
                           random_weights("standard", loaded.config.n_embd, 16))
    records = {"checkpoint": record_of(loaded), "prompt": PromptRecord("The cat sat"),
               "export": ExportRecord("residual", ".npy", private=private)}
    if spec is not None:
        sae = SaeRecord(0, spec or folder, hook, loaded.config.n_embd, 16, sae_fingerprint(folder))
        records["saes"] = SaesRecord((sae,))
    path = ctx.tmp / "sae.manifest.json"
    path.write_text(manifest_text(records))
    return ctx.cli("export", "--from-manifest", str(path), "--out", str(ctx.tmp / "r.npy"), *extra)


def _manifest_unwritable(ctx):
    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    ctx.mp.setattr("transformer_viewer.model.sessions.figure_manifest.write_manifest", full)
    return ctx.cli("export", ctx.ckpt, "--prompt", "The cat sat", "--view", "residual", "--out", str(ctx.tmp / "r.npy"),
                   "--write-manifest")


def _no_embedded(ctx):
    path = ctx.tmp / "plain.svg"
    path.write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    return ctx.cli("export", "--from-manifest", str(path), "--out", str(ctx.tmp / "m.svg"))


def _huge_figure(ctx):
    from transformer_viewer.model.sessions import figure_manifest

    ctx.mp.setattr(figure_manifest, "MAX_FIGURE_BYTES", 16)
    path = ctx.tmp / "big.pdf"
    path.write_bytes(b"%PDF-1.4" + b"\0" * 64)
    return raised(lambda: figure_manifest.read_manifest(str(path)))


def _svg_without_svg(_ctx):
    from transformer_viewer.model.sessions.figure_manifest import embedded_svg

    return raised(lambda: embedded_svg(b"<html/>", "{}"))


CASES = [
    Case("a figure without an embedded manifest", _no_embedded, "no figure manifest is embedded in it"),
    Case("a figure too large to hold a manifest", _huge_figure, "larger than a figure holding a manifest"),
    Case("an SVG without an <svg> element", _svg_without_svg, "the SVG has no <svg> element"),
    Case("--embed-manifest in a PNG", lambda c: c.cli("export", c.ckpt, "--prompt", "The cat", "--out",
                                                      str(c.tmp / "a.png"), "--embed-manifest"),
         "--embed-manifest is for .svg and .pdf figures"),
    Case("session: a member that leaves the archive", lambda c: _load(c, "zip-slip"), "a member named '../../evil.npy'"),
    Case("session: a field of the wrong type", lambda c: _load(c, "wrong-type"), "is text, not a whole number"),
    Case("session: a newer major version", lambda c: _load(c, "newer-version"), "written by a newer transformer-viewer"),
    Case("session: more arrays than a session holds", _too_many_arrays, "a session holds at most 16 arrays"),
    Case("session: an array name that is no file name", _bad_array_name, "lower-case letters, digits"),
    Case("session: a part that is no object", lambda c: _parts(c, {"prompt": []}), "part prompt: is a list, not an object"),
    Case("session: a required field missing", lambda c: _parts(c, {"intervention": {"n_head": 2}}),
         "intervention.n_layer: is missing"),
    Case("session: a number that is no number", lambda c: _parts(c, {"views": {"routes": {"threshold": "high"}}}),
         "routes.threshold: is text, not a number"),
    Case("session: a threshold out of range", lambda c: _parts(c, {"views": {"routes": {"threshold": 7}}}),
         "is 7, outside 0..0.5"),
    Case("session: a flag that is no flag", lambda c: _parts(c, {"views": {"routes": {"renormalize": 1}}}),
         "is a number, not true or false"),
    Case("session: an unknown ablation", lambda c: _parts(c, {"intervention": {"n_layer": 1, "n_head": 1,
                                                                                "ablation": "melt"}}),
         "not one of zero, mean"),
    Case("session: a list that is no list", lambda c: _parts(c, {"views": {"hidden": "grid"}}), "is text, not a list"),
    Case("session: too long a list", lambda c: _parts(c, {"views": {"hidden": ["grid"] * 65}}),
         "has 65 entries, more than 64"),
    Case("session: too long a text", lambda c: _parts(c, {"figures": {"exported": [{"path": "x" * 5000}]}}),
         "5,000 characters long"),
    Case("session: a NUL in a text", lambda c: _parts(c, {"prompt": {"text": "a\x00b"}}), "holds a NUL character"),
    Case("session: a pair that is no pair", lambda c: _parts(c, {"views": {"rollout": {"layers": [1]}}}),
         "not a pair of whole numbers"),
    Case("session: an empty layer range", lambda c: _parts(c, {"views": {"rollout": {"layers": [2, 1]}}}),
         "an empty range"),
    Case("session: a token that is no token id", lambda c: _parts(c, {"views": {"attribution_tokens": [-1]}}),
         "is not a token id"),
    Case("session: a zoom for too many views", lambda c: _parts(c, {"selection": {"zoom": {
        f"v{i}": {"rows": [0, 1], "cols": [0, 1]} for i in range(65)}}}), "views, more than 64"),
    Case("session: a zoom for no view", lambda c: _parts(c, {"selection": {"zoom": {"../x": {}}}}),
         "that no view id is"),
    Case("session: a window layout that is no base64", lambda c: _load(c, "bad-window-base64"), "is not base64 text"),
    Case("session: prompt pairs that are no pairs", lambda c: _parts(c, {"patching": {"pairs": [["only one"]]}}),
         "patching.pairs[0]: is not a pair of prompts"),
    Case("session: a patching metric this version lacks", lambda c: _parts(c, {"patching": {"metric": "vibes"}}),
         "patching.metric: is 'vibes', not one of"),
    Case("session: a mask outside the model", lambda c: _load(c, "mask-out-of-model"), "names head 5.0"),
    Case("session: a clamp's value out of range", lambda c: _load(c, "clamp-value-huge"),
         "clamps[0].value: is 1e+300, outside"),
    Case("session: a clamp of a kind this version lacks", lambda c: _load(c, "clamp-kind"),
         "clamps[0].kind: is 'melt', not one of set, scale"),
    Case("session: more clamps than a run applies", lambda c: _load(c, "clamp-too-many"),
         "has 257 entries, more than 256"),
    Case("session: two SAEs of one index", lambda c: _load(c, "sae-index-twice"),
         "which another SAE of the session has"),
    Case("session: an SAE wider than any", lambda c: _load(c, "sae-width-huge"), "saes.saes[0].d_sae: is"),
    Case("session: a selected SAE it does not open", lambda c: _load(c, "sae-selected-unknown"),
         "which no SAE of the session has"),
    Case("session: a selected feature past the SAE's width", lambda c: _load(c, "sae-feature-past-width"),
         "not a feature of the selected SAE"),
    Case("--session whose SAE is gone", lambda c: _session_with_sae(c, str(c.tmp / "gone_sae")),
         "SAE 0 of the session"),
    Case("features without an SAE or a session that opened one",
         lambda c: c.cli("features", c.ckpt, "--prompt", "The cat"), "give an SAE with --sae PATH[@HOOK]"),
    Case("--session without a prompt or a session", lambda c: c.cli("attribute", c.ckpt), "give the text to run"),
    Case("--session whose checkpoint is gone",
         lambda c: c.cli("attribute", "--session", _session_of(c, source=str(c.tmp / "gone.safetensors"))),
         "is not on this machine; give it with --checkpoint PATH"),
    Case("--session of another model's shape",
         lambda c: c.cli("attribute", "--session", _session_of(c, n_layer=9)), "heads, but the session"),
    Case("figure manifest of a newer version", lambda c: _manifest(c, lambda d: d.__setitem__("version", "9.0")),
         "a figure manifest of format 9.0, written by a newer"),
    Case("figure manifest of another format", lambda c: _manifest(c, lambda d: d.__setitem__("format", "x")),
         "not a figure manifest"),
    Case("figure manifest without a version", lambda c: _manifest(c, lambda d: d.pop("version")),
         "no format version such as"),
    Case("figure manifest without parts", lambda c: _manifest(c, lambda d: d.pop("parts")), "the manifest has no parts"),
    Case("figure manifest without its export", lambda c: _manifest(c, lambda d: d["parts"].pop("export")),
         "says nothing about the export"),
    Case("figure manifest with an inverted region",
         lambda c: _manifest(c, lambda d: d["parts"]["export"].__setitem__("region", [2, 1, 0, 1])),
         "export.region: is [2, 1, 0, 1], not [x0, x1, y0, y1] with x0 < x1"),
    Case("figure manifest of a view this version lacks",
         lambda c: _manifest(c, lambda d: d["parts"]["export"].__setitem__("view", "hologram")),
         "cannot be exported by this version"),
    Case("figure manifest that cannot be written", _manifest_unwritable, "manifest.json: No space left on device"),
    Case("figure manifest whose SAE is gone", lambda c: _sae_manifest(c, spec=str(c.tmp / "gone_sae")),
         "SAE 0 of the manifest"),
    Case("private figure manifest without --sae", lambda c: _sae_manifest(c, spec="my-sae", private=True),
         "is private and leaves the paths of its SAEs out; give each of its 1 SAEs with --sae"),
    Case("figure manifest given more --sae than it opens",
         lambda c: _sae_manifest(c, "--sae", str(c.tmp / "sae"), "--sae", str(c.tmp / "sae")),
         "opens 1 SAEs, and 2 --sae are given"),
    Case("figure manifest of no SAE given --sae", lambda c: _sae_manifest(c, "--sae", str(c.tmp / "x"), spec=None),
         "opens no SAE; regenerate it without --sae"),
]
