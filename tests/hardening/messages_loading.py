"""Triggers for the messages of a model folder's files that lead elsewhere: a link out of the
folder, and a cache snapshot's link into another repository's blobs/."""

from __future__ import annotations

import os

from tests.hardening.message_case import Case, raised
from tests.model import tokenizer_common as tc
from transformer_viewer.model.checkpoint import load_checkpoint
from transformer_viewer.model.tokenizer import load_tokenizer


def tokenizer_link_out(ctx):
    folder = tc.metaspace(str(ctx.tmp / "tok"))
    os.replace(os.path.join(folder, "tokenizer.json"), ctx.tmp / "elsewhere.json")
    os.symlink(ctx.tmp / "elsewhere.json", os.path.join(folder, "tokenizer.json"))
    return raised(lambda: load_tokenizer(folder))


def blob_of_another_repo(ctx):
    """A cache snapshot whose config.json links into another repository's blobs/."""
    snap = ctx.tmp / "hub" / "models--org--a" / "snapshots" / "rev"
    snap.mkdir(parents=True)
    (ctx.tmp / "hub" / "models--org--a" / "blobs").mkdir()
    other = ctx.tmp / "hub" / "models--org--b" / "blobs"
    other.mkdir(parents=True)
    (other / "0123").write_text("{}")
    os.symlink(os.path.join("..", "..", "..", "models--org--b", "blobs", "0123"), snap / "config.json")
    return raised(lambda: load_checkpoint(str(snap)))


CASES = [
    Case("tokenizer.json links out of its folder", tokenizer_link_out,
         "elsewhere.json, outside the model folder (a model folder's files must lie inside it); copy the file"),
    Case("a cache snapshot's link into another repository's blobs", blob_of_another_repo,
         "models--org--b/blobs/0123, outside the model folder (a cache snapshot may link only into its own "
         "repository's blobs/)"),
]
