"""Message triggers for inputs whose size the user or a file chooses: compressed training data,
the head scores' passages and memory, a capture's attention on the CPU, and the training record
`train --resume` continues."""

from __future__ import annotations

import gzip
import lzma

from tests.hardening.corpus_inputs import huge_dictionary_xz
from tests.hardening.message_case import Case, raised
from transformer_viewer.model.analysis.heads import MAX_PASSAGES, detect_heads
from transformer_viewer.model.capture import memory_budget
from transformer_viewer.model.capture.memory_budget import scoring_bytes
from transformer_viewer.model.checkpoints.formats.schema import check_resumable, check_training
from transformer_viewer.model.training.data import decompress_xz, read_text

TEXT = b"The cat sat on the mat. " * 400


def _data_file(ctx, name, data):
    path = ctx.tmp / name
    path.write_bytes(data)
    return lambda: read_text(str(path))


def _corrupt_xz(ctx):
    data = bytearray(lzma.compress(TEXT))
    data[40:60] = b"\xff" * 20  # inside the compressed block: the decoder finds it corrupt
    return raised(_data_file(ctx, "corrupt.xz", bytes(data)))


def _scoring_session(ctx, fits: int):
    s = ctx.session()
    s.memory_budget = scoring_bytes(s.config, fits)
    return s


def _cpu_work(ctx):
    s = ctx.session()
    ctx.mp.setattr(memory_budget, "MAX_CPU_ATTENTION_SCORES", memory_budget.attention_scores(s.config, 8))
    s.set_prompt("one two three four five six seven eight nine ten")
    return raised(s.run)


def _train_onto_existing(ctx):
    data = ctx.tmp / "data.txt"
    data.write_bytes(TEXT)
    return ctx.cli("train", "--data", str(data), "--out", ctx.ckpt, "--steps", "1", "--device", "cpu")


CASES = [
    Case("train --out onto an existing checkpoint", _train_onto_existing, "add --resume to continue its run"),
    Case("an .xz bomb", lambda ctx: raised(lambda: decompress_xz(lzma.compress(TEXT), "bomb.xz", cap=1000)),
         "more than training data may be"),
    Case("a truncated .xz", lambda ctx: raised(_data_file(ctx, "cut.xz", lzma.compress(TEXT)[:-30])), "ends early"),
    Case("an .xz asking for a 4 GiB dictionary", lambda ctx: raised(_data_file(ctx, "dict.xz", huge_dictionary_xz(TEXT))),
         "asks for a dictionary"),
    Case("a corrupt .xz", _corrupt_xz, "not a valid .xz file"),
    Case("plain text named .xz", lambda ctx: raised(_data_file(ctx, "plain.xz", TEXT)), "no xz header"),
    Case("gzip data", lambda ctx: raised(_data_file(ctx, "data.gz", gzip.compress(TEXT))), "gzip-compressed data"),
    Case("a history entry of the wrong type",
         lambda ctx: raised(lambda: check_training("ckpt", {"history": [{"val_loss": "low"}]})),
         "history[0].val_loss must be a number"),
    Case("a history entry --resume cannot continue",
         lambda ctx: raised(lambda: check_resumable("ckpt", {"history": [{"step": 1, "train_loss": 1.0}]})),
         "has no val_loss, which --resume continues from"),
    Case("too many passages for the head scores",
         lambda ctx: raised(lambda: detect_heads(ctx.session(), texts=["a b"] * (MAX_PASSAGES + 1))),
         "passages (paragraphs between blank lines)"),
    Case("a passage over the scoring budget",
         lambda ctx: raised(lambda: detect_heads(_scoring_session(ctx, 8), text_ids=[list(range(1, 30))])),
         "split the text into paragraphs of at most 8 tokens"),
    Case("repeated sequences over the scoring budget, a smaller batch fits",
         lambda ctx: raised(lambda: detect_heads(_scoring_session(ctx, 40), text_ids=[[1, 2, 3]],
                                                 induction_length=10, induction_batch=100, prefix=[])),
         "or fewer at this length"),
    Case("repeated sequences over the scoring budget, even one is too long",
         lambda ctx: raised(lambda: detect_heads(_scoring_session(ctx, 8), text_ids=[[1, 2, 3]],
                                                 induction_length=10, induction_batch=1, prefix=[])),
         "use a shorter --length (at most 4, with --batch 1)"),
    Case("a capture over the CPU's attention bound", _cpu_work, "shorten the prompt to 8 tokens or fewer"),
]
