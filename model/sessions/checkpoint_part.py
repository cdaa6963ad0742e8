"""The `checkpoint` part: which model the session ran, and how to tell it is still the same.

`source` is the path or cached name it was loaded from (None: the bundled model, wherever this
install keeps it). A reopened session loads `source` through the same checks as a path the user
types, then compares the fingerprint taken at that load with the one saved here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from transformer_viewer.model.checkpoints.bundled import bundled_checkpoint_path
from transformer_viewer.model.sessions.fields import Fields
from transformer_viewer.model.sessions.fingerprint import HF_CACHE, SAMPLED, Fingerprint
from transformer_viewer.model.sessions.parts import Part

MAX_COUNT = 1 << 20  # layers, heads, widths: far beyond any model, small enough to allocate a mask of
MAX_VOCAB = 1 << 24


@dataclass(frozen=True)
class CheckpointRecord:
    source: str | None  # a path or a cached model's name; None: the bundled model
    name: str
    format: str
    family: str
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    fingerprint: Fingerprint
    tokenizer: str  # the tokenizer's spec: "gpt2" or its folder
    tokenizer_fingerprint: str


def to_json(r: CheckpointRecord) -> dict:
    return {"source": r.source, "name": r.name, "format": r.format, "family": r.family,
            "config": {"n_layer": r.n_layer, "n_head": r.n_head, "n_embd": r.n_embd, "block_size": r.block_size,
                       "vocab_size": r.vocab_size},
            "fingerprint": {"method": r.fingerprint.method, "sha256": r.fingerprint.digest,
                            "files": r.fingerprint.files},
            "tokenizer": {"spec": r.tokenizer, "fingerprint": r.tokenizer_fingerprint}}


def from_json(f: Fields) -> CheckpointRecord:
    config, fp, tok = (f.nested(key, required=True) for key in ("config", "fingerprint", "tokenizer"))
    record = CheckpointRecord(
        source=f.text("source"), name=f.text("name", ""), format=f.text("format", ""), family=f.text("family", ""),
        n_layer=config.integer("n_layer", 1, MAX_COUNT, required=True),
        n_head=config.integer("n_head", 1, MAX_COUNT, required=True),
        n_embd=config.integer("n_embd", 1, MAX_COUNT, 0), block_size=config.integer("block_size", 1, 1 << 30, 0),
        vocab_size=config.integer("vocab_size", 1, MAX_VOCAB, 0),
        fingerprint=Fingerprint(fp.choice("method", (HF_CACHE, SAMPLED), required=True),
                                fp.text("sha256", "", max_chars=64), fp.integer("files", 0, 1 << 16, 0)),
        tokenizer=tok.text("spec", "gpt2"), tokenizer_fingerprint=tok.text("fingerprint", "", max_chars=80))
    for sub in (config, fp, tok):
        sub.finish()
    return record


PART = Part("checkpoint", 1, to_json, from_json)


def checkpoint_available(source: str | None) -> bool:
    """Whether the checkpoint `source` (None: the bundled model) is on this machine; what it
    holds is checked by the load, as for any path the user types."""
    from transformer_viewer.model.checkpoints.formats import (
        hf_cache,  # brings torch: asked only for a session's model
    )

    if source is None:
        return os.path.exists(bundled_checkpoint_path())
    if os.path.exists(source):
        return True
    return hf_cache.looks_like_name(source) and hf_cache.find_snapshot(source) is not None


def record_of(loaded) -> CheckpointRecord:
    """The record of a `LoadedModel` just loaded, with its fingerprint taken now."""
    from transformer_viewer.model.checkpoints.bundled import is_bundled
    from transformer_viewer.model.decoder.families import family_name
    from transformer_viewer.model.sessions.fingerprint import checkpoint_fingerprint, tokenizer_fingerprint

    c, source = loaded.config, loaded.source
    if is_bundled(source):
        source = None
    elif os.path.exists(source):
        source = os.path.abspath(source)
    return CheckpointRecord(source, loaded.name, loaded.format, family_name(c, loaded.training), c.n_layer, c.n_head,
                            c.n_embd, c.block_size, c.vocab_size, checkpoint_fingerprint(loaded.source),
                            loaded.tokenizer.spec, tokenizer_fingerprint(loaded.tokenizer.spec))
