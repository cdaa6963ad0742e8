"""Triggers for the messages of reading files: something that is no regular file where a file
is read (a named pipe, at every place a file is opened), a safetensors file that ends early or
whose header describes impossible tensors, a read error halfway through, a text file that grows
while it is read, and a path whose name is not UTF-8 as a file dialog passes it on."""

from __future__ import annotations

import errno
import json
import os
import struct

from tests.hardening.corpus import _hf_folder, _model
from tests.hardening.message_case import Case, raised
from tests.helpers.failing_open import fail_opens
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.checkpoints.formats import safetensors_file
from transformer_viewer.model.files import file_head, regular_file
from transformer_viewer.model.files.text_file import read_text_file


def fifo(path) -> str:
    os.mkfifo(path)
    return str(path)


def load(path):
    return raised(lambda: load_checkpoint(str(path)))


def hf_with_fifo(ctx, name: str):
    """A valid GPT-2 folder whose `name` is replaced by a named pipe."""
    folder = _hf_folder(str(ctx.tmp / "hf"), _model())
    target = os.path.join(folder, name)
    if os.path.exists(target):
        os.remove(target)
    fifo(target)
    return load(folder)


def sharded_with_fifo(ctx, what: str):
    folder = _hf_folder(str(ctx.tmp / "sharded"), _model())
    os.remove(os.path.join(folder, "model.safetensors"))
    index = os.path.join(folder, "model.safetensors.index.json")
    shard = os.path.join(folder, "model-00001-of-00001.safetensors")
    if what == "index":
        fifo(index)
    else:
        with open(index, "w", encoding="utf-8") as f:
            json.dump({"weight_map": {"transformer.wte.weight": os.path.basename(shard)}}, f)
        if what == "shard":
            fifo(shard)
        else:  # a link that leads to itself
            os.symlink(os.path.basename(shard), shard)
    return load(folder)


def raw_safetensors(ctx, header: dict, data: bytes = b"\0" * 8):
    text = json.dumps(header).encode()
    path = ctx.tmp / "h.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return load(path)


def truncated_while_read(ctx):
    """The file shrinks to half between the header and the tensors (another program rewriting it)."""
    path = ctx.tmp / "shrinking.safetensors"
    path.write_bytes(open(ctx.ckpt, "rb").read())
    real, cut = safetensors_file.read_tensor, []

    def truncate_once(p, f, entry):
        if not cut:
            cut.append(os.path.getsize(path) // 2)
            os.truncate(path, cut[0])
        return real(p, f, entry)

    ctx.mp.setattr(safetensors_file, "read_tensor", truncate_once)
    return load(path)


def read_error_in_tensor(ctx):
    """The disk fails (EIO) while a tensor's bytes are read."""
    real = regular_file.open_regular

    class Failing:
        def __init__(self, f):
            self.f = f

        def readinto(self, _view):
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    ctx.mp.setattr(regular_file, "open_regular", lambda p, buffering=-1: Failing(real(p, buffering)))
    return raised(lambda: safetensors_file.read_tensors(ctx.ckpt))


def text_file(ctx, how: str):
    path = ctx.tmp / "passages.txt"
    if how == "fifo":
        return ctx.cli("heads", "--checkpoint", ctx.ckpt, "--text", fifo(path))
    path.write_text("The cat sat on the mat. " * 10)
    if how == "grows":  # its size said 0 bytes when it was opened: it grew while it was read
        ctx.mp.setattr(regular_file, "size_of", lambda _f: 0)
    else:
        fail_opens(ctx.mp, path, lambda name: OSError(errno.EIO, os.strerror(errno.EIO), name))
    return raised(lambda: read_text_file(str(path), 100, "head scores need", "give less"))


def train_onto_an_existing_file(ctx):
    (ctx.tmp / "data.txt").write_text("The cat sat on the mat. " * 50)
    return ctx.cli("train", "--data", str(ctx.tmp / "data.txt"), "--out", ctx.ckpt, "--steps", "1")


def training_data_fifo(ctx):
    from transformer_viewer.model.training.data import load_corpus

    return raised(lambda: load_corpus([fifo(ctx.tmp / "data.txt")]))


CASES = [
    Case("a checkpoint that is a named pipe", lambda c: load(fifo(c.tmp / "m.safetensors")),
         "a named pipe (FIFO), not a regular file or folder; give a checkpoint file"),
    Case("a named pipe at the start of a read", lambda c: raised(lambda: file_head.read_head(fifo(c.tmp / "p"), 8)),
         "a named pipe (FIFO), not a regular file; put the checkpoint file itself there"),
    Case("safetensors read of a named pipe", lambda c: raised(lambda: safetensors_file.read_tensors(fifo(c.tmp / "p"))),
         "a named pipe (FIFO), not a regular file; put the safetensors file itself there"),
    Case("config.json a named pipe", lambda c: hf_with_fifo(c, "config.json"),
         "config.json: a named pipe (FIFO), not a regular file; restore the model's config.json"),
    Case("model.safetensors a named pipe", lambda c: hf_with_fifo(c, "model.safetensors"),
         "model.safetensors: a named pipe (FIFO), not a regular file"),
    Case("tokenizer.json a named pipe", lambda c: hf_with_fifo(c, "tokenizer.json"),
         "tokenizer.json: a named pipe (FIFO), not a regular file; restore the model's own tokenizer.json"),
    Case("shard index a named pipe", lambda c: sharded_with_fifo(c, "index"),
         "a named pipe (FIFO), not a regular file; restore the index"),
    Case("shard a named pipe", lambda c: sharded_with_fifo(c, "shard"),
         "shard model-00001-of-00001.safetensors is a named pipe (FIFO), not a regular file"),
    Case("shard a link loop", lambda c: sharded_with_fifo(c, "loop"),
         "cannot be read (a symbolic link loop"),
    Case("training data a named pipe", training_data_fifo,
         "a named pipe (FIFO), not a regular file; give the training text as a regular file"),
    Case("heads --text a named pipe", lambda c: text_file(c, "fifo"),
         "a named pipe (FIFO), not a regular file; give the text file as a regular file"),
    Case("a text file that grows while read", lambda c: text_file(c, "grows"),
         "more than 100 bytes is more text than head scores need; give less"),
    Case("a text file the disk cannot read", lambda c: text_file(c, "eio"),
         "cannot read the text file (Input/output error)"),
    Case("safetensors truncated while read", truncated_while_read,
         "the file ended early (at byte"),
    Case("safetensors read error in a tensor", read_error_in_tensor,
         "cannot be read (Input/output error); copy the file to a local disk"),
    Case("safetensors metadata of numbers", lambda c: raw_safetensors(c, {"__metadata__": {"format": 1}}),
         "__metadata__ is not a map of strings"),
    Case("safetensors entry not an object", lambda c: raw_safetensors(c, {"w": 3}),
         "is not an object with dtype, shape and data_offsets"),
    Case("safetensors offsets backwards", lambda c: raw_safetensors(
        c, {"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}), "not [begin, end] with begin <= end"),
    Case("safetensors tensors overlapping", lambda c: raw_safetensors(
        c, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}), "'a' and 'b' overlap"),
    Case("train --out onto an existing file", train_onto_an_existing_file,
         "already exists: add --resume to continue its run, --overwrite to replace it"),
    Case("a name with U+FFFD that names nothing", lambda c: load(c.tmp / "mod\ufffd.safetensors"),
         "file not found; its name holds a character that stands for bytes that are not UTF-8"),
]
