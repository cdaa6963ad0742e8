"""`FILE.manifest.json`: what regenerates an exported figure or data file.

A manifest holds the session parts the export depends on (the checkpoint with its fingerprint,
the prompt, the intervention with its feature clamps, the SAEs those clamps name, the
environment that computed it) and an `export` part: the view, its options, and the sha256 of
the file written. `transformer-viewer export --from-manifest` reads it back as untrusted input
(untrusted_json, every field checked) and runs the same export: the same bytes of data on the
same machine with the same kernel path and threads, within float32 rounding elsewhere
(environment_part.py).

The `saes` part is a session's (saes_part.py): each SAE's spec, hook point, widths and the
fingerprint of its files. Like the checkpoint's path, a spec is only text here: regenerating
opens it through the same load as a typed `--sae` and compares the fingerprint once loaded.

The `patching` part is a saved session's (patching_part.py): the patching view's experiment,
its corrupted prompt, metric and tokens, position, direction, what is patched, the layer and
receiver; the export part's `estimate` says whether the figure shows attribution patching's
estimate rather than the exact grid.

`private=True` leaves the prompt and every local path out (they may not be the user's to share):
the checkpoint's and each SAE's path and labels file keep only their file names, and the
patching part its corrupted prompt (and any pairs). Such a manifest records the rest, and
regenerating it needs `--prompt` (and `--corrupted`), the checkpoint and each `--sae` given.

A manifest can also travel inside the figure (`embed`): base64 JSON in an SVG's `<metadata>` or
a PDF's XMP packet, between fixed markers; `--from-manifest FIGURE.svg` reads it back from there.
An embedded manifest cannot hold the sha256 of the file that holds it: its `sha256` is empty.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from dataclasses import dataclass, replace

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files import atomic_write, regular_file, untrusted_json
from transformer_viewer.model.files.file_errors import read_errors
from transformer_viewer.model.sessions import (
    checkpoint_part,
    environment_part,
    patching_part,
    prompt_part,
    saes_part,
)
from transformer_viewer.model.sessions.fields import Fields
from transformer_viewer.model.sessions.parts import Part
from transformer_viewer.model.sessions.registry import decode, encode

FORMAT = "transformer-viewer figure"
VERSION = (1, 0)
SUFFIX = ".manifest.json"
MAX_MANIFEST_BYTES = 4 << 20
FORMATS = (".png", ".svg", ".pdf", ".npy", ".csv")
FIX = "the file is damaged or is not a transformer-viewer figure manifest"


@dataclass(frozen=True)
class ExportRecord:
    """The export command's options, as `transformer-viewer export` takes them."""

    view: str
    out_format: str  # one of FORMATS
    layer: int | None = None
    head: int | None = None
    query: int | None = None
    mode: str = "head"
    colormap: str = "viridis"
    log: bool = False
    theme: str = "light"
    width: str | None = None
    dpi: float | None = None
    scale: float | None = None
    size: tuple[int, int] | None = None
    pooled: bool = False
    diff: bool = False
    target: str | None = None
    distractor: str | None = None
    show: str = "effect"
    sort: str = "max"
    rows: int = 64
    region: tuple[float, float, float, float] | None = None  # the heatmap's part drawn (x0, x1, y0, y1), zoomed
    file: str = ""  # the file's name
    sha256: str = ""  # of the file's bytes
    embed: bool = False  # the manifest is embedded in the SVG or PDF itself
    private: bool = False  # the manifest leaves the prompt and local paths out
    estimate: bool = False  # patching: attribution patching's estimate, not the exact grid


def _export_to_json(r: ExportRecord) -> dict:
    d = dict(r.__dict__)
    d["size"] = None if r.size is None else list(r.size)
    d["region"] = None if r.region is None else list(r.region)
    return d


def _export_from_json(f: Fields) -> ExportRecord:
    return ExportRecord(
        view=f.text("view", required=True, max_chars=40), out_format=f.choice("out_format", FORMATS, required=True),
        layer=f.integer("layer", 0, 1 << 20), head=f.integer("head", 0, 1 << 20), query=f.integer("query", 0, 1 << 24),
        mode=f.choice("mode", ("head", "layer-mean", "head-mean"), "head"), colormap=f.text("colormap", "viridis", 40),
        log=f.flag("log"), theme=f.choice("theme", ("light", "dark"), "light"), width=f.text("width", None, 20),
        dpi=f.number("dpi", 10, 2400), scale=f.number("scale", 1e-3, 16), size=f.pair("size", 16, 16384),
        pooled=f.flag("pooled"), diff=f.flag("diff"), target=f.text("target", None, 200),
        distractor=f.text("distractor", None, 200), show=f.choice("show", ("effect", "kl", "prob"), "effect"),
        sort=f.choice("sort", ("max", "token", "index"), "max"), rows=f.integer("rows", 1, 1 << 16, 64),
        region=f.span("region", 0, 1 << 24), file=f.text("file", ""), sha256=f.text("sha256", "", 64),
        embed=f.flag("embed"), private=f.flag("private"), estimate=f.flag("estimate"))


EXPORT = Part("export", 1, _export_to_json, _export_from_json)
PARTS: dict[str, Part] = {p.name: p for p in (checkpoint_part.PART, prompt_part.PROMPT, prompt_part.INTERVENTION,
                                               saes_part.PART, environment_part.PART, patching_part.PART, EXPORT)}


def manifest_path(out: str) -> str:
    return out + SUFFIX


def file_sha256(path: str) -> str:
    """sha256 of the file at `path`, read a MiB at a time (an exact pattern may be GBs)."""
    h = hashlib.sha256()
    with regular_file.open_regular(path, buffering=0) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def manifest_text(records: dict[str, object], private: bool = False) -> str:
    """The manifest as JSON text; `private`: the prompt and the local paths left out."""
    if private:
        records = {k: v for k, v in records.items() if k != "prompt"}
        if (p := records.get("patching")) is not None:  # the corrupted prompt is a prompt too
            records["patching"] = replace(p, corrupted="", pairs=())
        if (c := records.get("checkpoint")) is not None and c.source is not None and os.path.isabs(c.source):
            records["checkpoint"] = replace(c, source=os.path.basename(c.source),
                                            tokenizer=c.tokenizer if c.tokenizer == "gpt2" else "")
        if (s := records.get("saes")) is not None:
            records["saes"] = replace(s, saes=tuple(replace(r, spec=_private_path(r.spec), labels=_private_path(r.labels))
                                                    for r in s.saes))
    doc = {"format": FORMAT, "version": f"{VERSION[0]}.{VERSION[1]}", "private": private,
           "parts": encode(records, PARTS)}
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, indent=1) + "\n"


def _private_path(path: str | None) -> str | None:
    """A local path as its file name alone (a folder's: its own name); anything else (None, a
    REPO_ID/SUBFOLDER of the Hugging Face cache) as it is."""
    if path is None or not os.path.isabs(path):
        return path
    return os.path.basename(os.path.normpath(path))


def write_manifest(out: str, records: dict[str, object], private: bool = False) -> str:
    """Write `out`.manifest.json atomically; returns its path."""
    return atomic_write.write_bytes(manifest_path(out), manifest_text(records, private).encode("utf-8"))


# -- embedded in a figure ---------------------------------------------------------------
SVG_OPEN, SVG_CLOSE = b'<metadata id="transformer-viewer-manifest">', b"</metadata>"
XMP_OPEN, XMP_CLOSE = b"<tv:manifest>", b"</tv:manifest>"
MAX_FIGURE_BYTES = 256 << 20  # a figure searched for its manifest


def embedded_svg(svg: bytes, text: str) -> bytes:
    """`svg` with the manifest `text` in a <metadata> element right after its <svg ...> tag."""
    start = svg.find(b"<svg")
    end = svg.find(b">", start)
    if start < 0 or end < 0:
        raise ModelError("the SVG has no <svg> element to hold the manifest; export without --embed-manifest")
    return svg[:end + 1] + SVG_OPEN + base64.b64encode(text.encode("utf-8")) + SVG_CLOSE + svg[end + 1:]


def xmp_packet(text: str) -> bytes:
    """An XMP packet (a PDF's document metadata) holding the manifest `text`."""
    return (b'<?xpacket begin="" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:meta/">'
            b'<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description rdf:about="" '
            b'xmlns:tv="https://github.com/transformer-viewer/manifest/1.0/">' + XMP_OPEN
            + base64.b64encode(text.encode("utf-8")) + XMP_CLOSE
            + b'</rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end="w"?>')


def _embedded(path: str) -> bytes:
    """The manifest JSON embedded in the SVG or PDF at `path` (ModelError when there is none)."""
    with read_errors(path, "give a FILE.manifest.json file or a figure holding one", "check the path"):
        data = regular_file.read_at_most(path, MAX_FIGURE_BYTES)
    if len(data) > MAX_FIGURE_BYTES:
        raise ModelError(f"{path}: more than {MAX_FIGURE_BYTES >> 20} MiB, larger than a figure holding a "
                         "manifest; give its FILE.manifest.json")
    for opening, closing in ((SVG_OPEN, SVG_CLOSE), (XMP_OPEN, XMP_CLOSE)):
        start = data.find(opening)
        end = data.find(closing, start + len(opening)) if start >= 0 else -1
        if start >= 0 and 0 <= end - start - len(opening) <= MAX_MANIFEST_BYTES * 4 // 3 + 4:
            try:
                return base64.b64decode(data[start + len(opening):end], validate=True)
            except binascii.Error:
                break
    raise ModelError(f"{path}: no figure manifest is embedded in it; give its FILE.manifest.json, or export "
                     "with --embed-manifest")


def read_manifest(path: str) -> tuple[dict[str, object], list[str]]:
    """(records, notes) of the manifest at `path`, or embedded in the SVG or PDF at `path`;
    ModelError for anything refused."""
    if path.lower().endswith((".svg", ".pdf")):
        doc = untrusted_json.parse(_embedded(path), path, FIX)
    else:
        with read_errors(path, "give a FILE.manifest.json file", "check the path"):
            doc = untrusted_json.read_file(path, FIX, max_bytes=MAX_MANIFEST_BYTES)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ModelError(f"{path}: not a figure manifest (it does not say it is a {FORMAT}); {FIX}")
    text = doc.get("version")
    match = re.fullmatch(r"(\d{1,4})\.(\d{1,4})", text) if isinstance(text, str) else None
    if match is None:
        raise ModelError(f"{path}: no format version such as \"1.0\"; {FIX}")
    if int(match.group(1)) > VERSION[0]:
        raise ModelError(f"{path}: a figure manifest of format {text}, written by a newer transformer-viewer (this "
                         f"one reads {VERSION[0]}.x); update transformer-viewer to regenerate it")
    parts = doc.get("parts")
    if not isinstance(parts, dict):
        raise ModelError(f"{path}: the manifest has no parts; {FIX}")
    notes: list[str] = []
    records = decode(parts, notes, PARTS)
    if "export" not in records:
        raise ModelError(f"{path}: the manifest says nothing about the export; {FIX}")
    return records, notes
