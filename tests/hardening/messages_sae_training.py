"""Triggers for the messages of `train-sae`: its arguments, the text it reads, the hook point it
trains at and the SAE folder it writes."""

from __future__ import annotations

import contextlib
import errno
import io

import torch

from tests.hardening.message_case import Case, raised
from tests.helpers.training import write_text

HOOK = "blocks.1.hook_resid_post"
FAST = ["--d-sae", "8", "--k", "2", "--steps", "2", "--batch-tokens", "32", "--context-size", "8",
        "--eval-windows", "2", "--windows-per-forward", "2"]


def train_sae(*extra, text_lines: int = 40, out: str = "sae", hook: str = HOOK, after_progress: bool = False):
    """train-sae's one error line; `after_progress`: once it has read the text (its `data:` line, and
    any evaluation lines, come first on stderr, as the training progress does)."""
    def trigger(ctx):
        text = write_text(ctx.tmp / "text.txt", n=text_lines)
        argv = ("train-sae", ctx.ckpt, "--hook", hook, "--data", text, "--out", str(ctx.tmp / out), *FAST, *extra)
        return error_after_progress(*argv) if after_progress else ctx.cli(*argv)
    return trigger


def error_after_progress(*argv) -> str:
    from transformer_viewer.viewer.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    lines = err.getvalue().strip().splitlines()
    assert rc == 2 and "Traceback" not in err.getvalue() and lines[0].startswith("data: "), (rc, err.getvalue())
    assert lines[-1].startswith("error: ") and not any(line.startswith("error: ") for line in lines[:-1])
    return lines[-1].removeprefix("error: ")


def with_out(make, *extra):
    """train-sae onto an --out that `make(path)` prepares first."""
    def trigger(ctx):
        make(ctx.tmp / "out")
        return train_sae(*extra, out="out")(ctx)
    return trigger


def holding_notes(path):
    path.mkdir()
    (path / "notes.txt").write_text("mine")


def no_writable_parent(ctx):
    import os

    ctx.mp.setattr(os, "access", lambda *_a, **_k: False)
    return train_sae()(ctx)


def full_disk(ctx):
    from transformer_viewer.model.training import sae_folder

    def fail(_path, _data):
        raise OSError(errno.ENOSPC, "No space left on device")

    ctx.mp.setattr(sae_folder, "write_bytes", fail)
    return train_sae(after_progress=True)(ctx)


def small_vocab_text(ctx):
    from transformer_viewer.model.tokenizers.tokenizer import Tokenizer
    from transformer_viewer.model.training.sae_activations import tokenized_corpus

    return raised(lambda: tokenized_corpus([write_text(ctx.tmp / "t.txt")], 0.2, Tokenizer(), 100))


def bad_fraction(ctx):
    from transformer_viewer.model.training.sae_activations import tokenized_corpus

    class OtherTokenizer:
        spec = "folder"

    return raised(lambda: tokenized_corpus([write_text(ctx.tmp / "t.txt")], 1.5, OtherTokenizer(), 100))


def config_check(**fields):
    def trigger(_ctx):
        from transformer_viewer.model.training.sae_train import SaeTrainConfig

        return raised(lambda: SaeTrainConfig(**{"d_sae": 8, "k": 2, **fields}).check(4))
    return trigger


def silent_layer(_ctx):
    from transformer_viewer.model.training.sae_train import Batches, norm_scale

    return raised(lambda: norm_scale(Batches(iter(lambda: torch.zeros(64, 4), None), 64), 4))


def bad_save_dtype(ctx):
    from transformer_viewer.model.training.sae_folder import write_sae_folder

    return raised(lambda: write_sae_folder(str(ctx.tmp / "x"), {}, {}, save_dtype="bfloat16"))


CASES = [
    Case("train-sae unknown hook", train_sae(hook="blocks.9.hook_resid_post"), "the model has no such hook point"),
    Case("train-sae hook of no vector per token", train_sae(hook="blocks.0.attn.hook_pattern"),
         "not one vector per token"),
    Case("train-sae d_sae 0", train_sae("--d-sae", "0"), "--d-sae must be at least 1, got 0"),
    Case("train-sae k over d_sae", train_sae("--k", "9"), "--k must be between 1 and --d-sae (8), got 9"),
    Case("train-sae negative l1", train_sae("--architecture", "standard", "--l1", "-1"),
         "--l1 must be a finite number of at least 0"),
    Case("train-sae zero steps", train_sae("--steps", "0"), "--steps must be at least 1, got 0"),
    Case("train-sae zero lr", train_sae("--lr", "0"), "--lr must be positive"),
    Case("train-sae zero eval windows", train_sae("--eval-windows", "0"), "--eval-windows must be at least 1"),
    Case("train-sae negative labels", train_sae("--labels", "-1"), "--labels cannot be negative"),
    Case("train-sae val fraction 1", train_sae("--val-fraction", "1"), "--val-fraction must be between 0 and 1"),
    Case("train-sae context past the model's", train_sae("--context-size", "65"),
         "--context-size must be between 1 and the model's context of 64, got 65"),
    Case("train-sae validation shorter than a window", train_sae("--context-size", "64", text_lines=3, after_progress=True),
         "the validation text holds"),
    Case("train-sae training text shorter than a window", train_sae("--val-fraction", "0.95", text_lines=6, after_progress=True),
         "fewer than one window of 8"),
    Case("train-sae out exists", with_out(lambda p: p.mkdir()), "already exists: add --overwrite"),
    Case("train-sae out is a file", with_out(lambda p: p.write_text("x"), "--overwrite"),
         "exists and is not a folder"),
    Case("train-sae out holds other files", with_out(holding_notes, "--overwrite"), "holds files that are not an SAE's"),
    Case("train-sae out's parent missing", train_sae(out="missing/sae"), "does not exist; create it"),
    Case("train-sae out's parent not writable", no_writable_parent, "cannot write in"),
    Case("train-sae full disk", full_disk, "cannot write the SAE folder (No space left on device); nothing was written"),
    Case("train-sae text outside the vocabulary", small_vocab_text, "outside the model's vocabulary of 100"),
    Case("train-sae tokenized corpus fraction", bad_fraction, "the validation fraction must be between 0 and 1"),
    Case("train-sae architecture", config_check(architecture="gated"), "--architecture must be one of topk, standard"),
    Case("train-sae batch tokens", config_check(batch_tokens=0), "--batch-tokens must be at least 1"),
    Case("train-sae silent layer", silent_layer, "there is nothing to train an SAE on"),
    Case("train-sae save dtype", bad_save_dtype, "--save-dtype must be one of float32, float16"),
]
