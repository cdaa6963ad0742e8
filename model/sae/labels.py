"""Feature labels from a file: a CSV of `id,label` (a header row is skipped) or a Neuronpedia
explanations export (JSON: a list of objects with `index` and `description`, or an object
holding that list under `explanations`). The file is untrusted: its size is bounded before it
is read, a label is cut to a line's length, and ids outside the SAE's features are refused.
"""

from __future__ import annotations

import csv
import io
import os

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files import untrusted_json
from transformer_viewer.model.files.text_file import decode_text, read_text_file

MAX_LABELS_BYTES = 16 << 20  # a Neuronpedia export of 131k features is a few MB
MAX_LABEL_CHARS = 200
FIX = "give a CSV of id,label or a Neuronpedia explanations export (JSON)"


def read_feature_labels(path: str, d_sae: int) -> dict[int, str]:
    """feature id -> label for an SAE of `d_sae` features (the first label of an id wins)."""
    raw = read_text_file(path, MAX_LABELS_BYTES, "a labels file holds", FIX, "labels file")
    text = decode_text(raw, path, "labels file").lstrip("\ufeff")
    if os.path.splitext(path)[1].lower() == ".json" or text.lstrip()[:1] in ("[", "{"):
        pairs = _neuronpedia(untrusted_json.parse(raw, path, FIX), path)
    else:
        pairs = _csv(text, path)
    labels: dict[int, str] = {}
    for fid, label in pairs:
        if not 0 <= fid < d_sae:
            raise ModelError(f"{path}: labels feature {fid}, but the SAE has features 0..{d_sae - 1}; give the labels "
                             "of this SAE")
        labels.setdefault(fid, " ".join(label.split())[:MAX_LABEL_CHARS])
    return labels


def _csv(text: str, path: str):
    rows = csv.reader(io.StringIO(text))
    for n, row in enumerate(rows, 1):
        if not row or not "".join(row).strip():
            continue
        fid = _id(row[0])
        if fid is None:
            if n == 1:  # a header
                continue
            raise ModelError(f"{path}: line {n} starts with {row[0][:20]!r}, not a feature id; {FIX}")
        yield fid, ",".join(row[1:])


def _neuronpedia(obj, path: str):
    if isinstance(obj, dict):
        obj = obj.get("explanations")
    if not isinstance(obj, list):
        raise ModelError(f"{path}: not a list of explanations; {FIX}")
    for item in obj:
        if not isinstance(item, dict):
            raise ModelError(f"{path}: an explanation is not an object; {FIX}")
        fid = _id(item.get("index", item.get("feature")))
        label = item.get("description", item.get("explanation", item.get("label")))
        if fid is None or not isinstance(label, str):
            raise ModelError(f"{path}: an explanation without an index and a description; {FIX}")
        yield fid, label


def _id(value) -> int | None:
    """A feature id written as ASCII digits (or a JSON integer)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        v = value.strip()
        if v and len(v) <= 12 and all("0" <= ch <= "9" for ch in v):
            return int(v)
    return None
