"""Session records with every field set away from its default, and hostile session files built
by code (nothing binary is committed): the model tests, the window tests and the hardening
corpus share them."""

from __future__ import annotations

import io
import json
import stat
import zipfile

import numpy as np

from transformer_viewer.model.sessions.checkpoint_part import CheckpointRecord
from transformer_viewer.model.sessions.container import FORMAT
from transformer_viewer.model.sessions.environment_part import Environment
from transformer_viewer.model.sessions.figures_part import FigureRecord
from transformer_viewer.model.sessions.fingerprint import SAMPLED, Fingerprint
from transformer_viewer.model.sessions.patching_part import PatchingRecord
from transformer_viewer.model.sessions.prompt_part import InterventionRecord, PromptRecord
from transformer_viewer.model.sessions.view_parts import (
    AttentionSettings,
    FigureSettings,
    RolloutSettings,
    RoutesSettings,
    SelectionRecord,
    ViewsRecord,
    WindowRecord,
)


def full_records(source: str = "/models/tiny.safetensors") -> dict[str, object]:
    """A record for every part, no field left at its default."""
    return {
        "checkpoint": CheckpointRecord(source, "tiny", "native", "Llama", 2, 4, 32, 64, 50257,
                                       Fingerprint(SAMPLED, "ab" * 32, 1), "/models/tok", "cd" * 32),
        "prompt": PromptRecord("The cat sat on the mat. \u00e9\u4e2d"),
        "intervention": InterventionRecord(2, 4, ((0, 1), (1, 3)), "mean"),
        "selection": SelectionRecord(1, 2, 3, 17, {"attention": ((1, 5), (0, 4)), "diff": ((2, 6), (2, 6))}),
        "views": ViewsRecord("routes", ("grid", "next-token"), (262, 11), RoutesSettings(4, 0.125, True),
                             RolloutSettings((1, 2), ((0, 1), (1, 2)), False), FigureSettings("dark", 150.0, (800, 600)),
                             AttentionSettings("layer-mean", "magma", True, "mean")),
        "window": WindowRecord(b"\x00\x00\x00\xffstate", b"\x01geometry"),
        "environment": Environment("0.1.0", "2.13.0", {"numpy": "2.4"}, "oneDNN GEMM, ATen AVX2", 3, "Some CPU",
                                   "Linux x86_64"),
        "figures": (FigureRecord("/figs/a.png", "attention", "/figs/a.png.manifest.json"),
                    FigureRecord("/figs/b.npy", "residual", None)),
        "patching": PatchingRecord(True, "The dog sat on the mat.", "logprob", (262,), 4, "noise", "heads-by-pos", 1,
                                   (1, 2), "k", False, (("a b", "a c"), ("d e", "d f")), "pairs.json"),
    }


def manifest_doc(parts: dict, version: str = "1.0") -> bytes:
    return json.dumps({"format": FORMAT, "version": version, "parts": parts}).encode()


def zip_of(members: list[tuple[str, bytes]], symlink: str | None = None,
           compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of `members` in order (duplicates kept); `symlink`: that member marked a link."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name)
            info.compress_type = compression
            if name == symlink:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, data)
    return buffer.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=True)
    return out.getvalue()


def hostile_sessions() -> dict[str, tuple[bytes, str]]:
    """name -> (file bytes, fragment of the one line that refuses it)."""
    good = manifest_doc({"prompt": {"version": 1, "text": "hi"}})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it is asked to write
        duplicate = zip_of([("manifest.json", good), ("manifest.json", good)])
    return {
        "zip-slip": (zip_of([("manifest.json", good), ("../../evil.npy", b"x")]), "a member named '../../evil.npy'"),
        "absolute-path": (zip_of([("manifest.json", good), ("/etc/evil", b"x")]), "a member named '/etc/evil'"),
        "symlink": (zip_of([("manifest.json", good), ("arrays/link.npy", b"/etc/passwd")], symlink="arrays/link.npy"),
                    "is a symbolic link"),
        "duplicate": (duplicate, "the member 'manifest.json' twice"),
        "too-many-members": (zip_of([("manifest.json", good)] + [(f"arrays/a{i}.npy", b"x") for i in range(40)]),
                             "members, more than the 17"),
        "zip-bomb": (zip_of([("manifest.json", good), ("arrays/bomb.npy", b"\0" * (20 << 20))]), "(a zip bomb?)"),
        "object-npy": (zip_of([("manifest.json", good),
                               ("arrays/obj.npy", npy_bytes(np.array([{"a": 1}, None], dtype=object)))]),
                       "a session's arrays hold numbers only"),
        "short-npy": (zip_of([("manifest.json", good), ("arrays/short.npy", npy_bytes(np.zeros(100))[:-40])]),
                      "does not match its bytes"),
        "not-zip": (b"PK\x03\x04 this is not really a zip file", "not a zip archive"),
        "no-manifest": (zip_of([("arrays/a.npy", npy_bytes(np.zeros(3)))]), "no manifest.json"),
        "other-format": (zip_of([("manifest.json", json.dumps({"format": "other", "version": "1.0"}).encode())]),
                         "does not say it is a transformer-viewer session"),
        "newer-version": (zip_of([("manifest.json", manifest_doc({}, "2.0"))]), "written by a newer transformer-viewer"),
        "deep-json": (zip_of([("manifest.json", b"[" * 5000 + b"]" * 5000)], compression=zipfile.ZIP_STORED), "nest"),
        "huge-number": (zip_of([("manifest.json", manifest_doc({"selection": {"layer": 10 ** 50}}))]),
                        "outside 0..1048576"),
        "wrong-type": (zip_of([("manifest.json", manifest_doc({"selection": {"layer": "two"}}))]),
                       "session part selection.layer: is text, not a whole number"),
        "mask-out-of-model": (zip_of([("manifest.json", manifest_doc(
            {"intervention": {"n_layer": 2, "n_head": 2, "masked": [[5, 0]]}}))]), "names head 5.0 of a 2 x 2 model"),
        "bad-window-base64": (zip_of([("manifest.json", manifest_doc({"window": {"state": "not base64!"}}))]),
                              "is not base64 text"),
    }
