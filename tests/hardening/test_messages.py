"""Every error message a user can see, listed: a table of triggering action -> expected fragment (CASES),
each run here and held to one line (no traceback), plus an inventory read from the source (every
`ModelError(...)`-family construction in model/ and viewer/): each message must be produced by a
trigger below or by the bad-checkpoint corpus, or be one of the few NOT_TRIGGERED with the reason it
cannot be reached. A new or reworded message without a trigger fails
`test_every_message_in_the_source_is_listed`, naming the file and line."""

from __future__ import annotations

import ast
import errno
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.hardening.message_case import Case, Ctx, area_cases, raised
from tests.helpers.failing_open import fail_opens
from tests.helpers.hardening import TINY, one_line
from transformer_viewer.model import device as device_module
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files import atomic_write
from transformer_viewer.viewer import export as ex
from transformer_viewer.viewer.worker import client as worker
from transformer_viewer.viewer.worker import handlers

ROOT = Path(__file__).resolve().parents[2]
USER_ERRORS = {"ModelError", "CheckpointError", "DeviceError", "CaptureTooLargeError", "ExportError", "_UserError"}


def session_with(ctx, text):
    s = ctx.session()
    s.set_prompt(text)
    return s


def small_vocab_session(ctx):
    model = GPT(GPTConfig(n_layer=1, n_head=1, n_embd=8, block_size=16, vocab_size=100)).eval()
    path = ctx.tmp / "small_vocab.safetensors"
    from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint

    save_checkpoint(model, str(path))
    s = Session(load_checkpoint(str(path)))
    return raised(lambda: s.set_prompt("hello world"))


def too_many_tokens(ctx):
    from transformer_viewer.model.tokenizers.tokenizer import Tokenizer

    s = ctx.session()
    return raised(lambda: s.set_tokens(Tokenizer().tokenize("word " * 100)))


def budget(ctx, fits):
    s = ctx.session()
    s.memory_budget = s.estimate_bytes(20) if fits else 100
    s.set_prompt(" ".join("one two three four five six seven eight nine ten".split() * 4))
    return raised(s.run)


def bundled_missing(ctx):
    from transformer_viewer.model.checkpoints import checkpoint

    ctx.mp.setattr(checkpoint, "bundled_checkpoint_path", lambda: str(ctx.tmp / "no-bundled.safetensors"))
    return raised(lambda: load_checkpoint(None))


def handler_bundled_missing(ctx):
    from transformer_viewer.viewer.worker.requests import LoadRequest

    ctx.mp.setattr(handlers, "bundled_checkpoint_path", lambda: str(ctx.tmp / "no-bundled.safetensors"))
    return raised(lambda: handlers.handle_load(None, LoadRequest(path=None), lambda *a: None, lambda: False))


def not_downloaded(ctx):
    ctx.mp.setenv("HF_HOME", str(ctx.tmp / "hf-home"))
    ctx.mp.setenv("HF_HUB_CACHE", str(ctx.tmp / "hf-home" / "hub"))
    return raised(lambda: load_checkpoint("openai-community/gpt2-not-here"))


def cache_without_weights(ctx):
    hub = ctx.tmp / "hub"
    snap = hub / "models--org--halfway" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"model_type": "gpt2"}')
    ctx.mp.setenv("HF_HUB_CACHE", str(hub))
    return raised(lambda: load_checkpoint("org/halfway"))


def gpt2_weights_without_config(ctx):
    state = {"transformer.wte.weight": torch.zeros(4, 2), "transformer.h.0.attn.c_attn.weight": torch.zeros(2, 6)}
    path = ctx.tmp / "weights_only.bin"
    torch.save(state, path)
    return raised(lambda: load_checkpoint(str(path)))


def untied_without_head(ctx):
    from tests.hardening.corpus import BASE, _hf_folder, _model

    folder = _hf_folder(str(ctx.tmp / "untied"), _model(BASE), {"tie_word_embeddings": False})
    return raised(lambda: load_checkpoint(folder))


def tutorial_bad_heads(ctx):
    path = ctx.tmp / "tutorial.pt"
    torch.save({"tok_emb.weight": torch.randn(512, 16), "blocks.0.attn.in_proj_weight": torch.randn(48, 16)}, path)
    return raised(lambda: load_checkpoint(str(path), n_head=5))


def unreadable(ctx, kind):
    """Root reads anything, so a user's "permission denied" is simulated at open()/listdir()."""
    import builtins

    from tests.helpers.failing_open import refuse_reads_of

    if kind == "file":
        path = ctx.tmp / "locked.safetensors"
        path.write_bytes(Path(ctx.ckpt).read_bytes())
        refuse_reads_of(ctx.mp, str(path))
        message = raised(lambda: load_checkpoint(str(path)))
        os.chmod(path, 0o644)
        return message
    if kind == "config":
        (ctx.tmp / "hf").mkdir()
        (ctx.tmp / "hf" / "config.json").write_text('{"model_type": "gpt2"}')
        refuse_reads_of(ctx.mp, str(ctx.tmp / "hf" / "config.json"))
        message = raised(lambda: load_checkpoint(str(ctx.tmp / "hf")))
        os.chmod(ctx.tmp / "hf" / "config.json", 0o644)
        return message
    folder = ctx.tmp / "locked"
    folder.mkdir()
    real = os.listdir

    def refusing(p="."):
        if os.path.abspath(os.fsdecode(p)) == str(folder):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(p))
        return real(p)

    ctx.mp.setattr(os, "listdir", refusing)
    assert builtins.open is not None
    return raised(lambda: load_checkpoint(str(folder)))


def io_error(ctx, kind):
    """A disk that fails (EIO) on the first or second open of a file."""
    path = ctx.tmp / ("m.safetensors" if kind != "zip" else "m.pt")
    if kind == "zip":
        torch.save({"model_args": {}, "model": {}}, path)
    else:
        path.write_bytes(Path(ctx.ckpt).read_bytes())
    fail_opens(ctx.mp, path, lambda name: OSError(errno.EIO, os.strerror(errno.EIO), name),
               from_call=1 if kind == "first" else 2)
    return raised(lambda: load_checkpoint(str(path)))


def export_error(ctx, fn):
    return raised(fn, ex.ExportError)


def window_export_without_trace(ctx, what, path):
    """The dialog-free core of File > Export on a window with nothing run yet (and a bad kind)."""
    from tests.helpers.hardening import Dialogs

    shown = Dialogs(ctx.mp)

    class FakeWindow:
        class state:  # noqa: N801 - mimics the window's attribute
            trace = None
        attention = head_grid = object()
        views = {"attention": attention, "grid": head_grid}
        status = None

        def show_error(self, message):
            shown.shown.append(message)

    from transformer_viewer.viewer.window.actions import export

    assert export(FakeWindow(), what, path) is None
    return shown.last


def window_export_grid_as_npy(ctx):
    from transformer_viewer.viewer.window.actions import export

    messages = []

    class FakeWindow:
        class state:  # noqa: N801
            trace = object()
        attention = head_grid = object()
        views = {"attention": attention, "grid": head_grid}

        def show_error(self, message):
            messages.append(message)

    export(FakeWindow(), "grid", str(ctx.tmp / "g.npy"))
    return messages[-1]


def window_export_of_an_empty_view(ctx):
    from transformer_viewer.viewer.window.actions import export

    messages = []

    class EmptyScan:
        def matrix(self):
            return np.zeros((0, 0), dtype=np.float32)

    class FakeWindow:
        class state:  # noqa: N801
            trace = object()
        views = {"scan": EmptyScan()}

        def show_error(self, message):
            messages.append(message)

    export(FakeWindow(), "scan", str(ctx.tmp / "s.png"))
    return messages[-1]


def no_cuda(ctx):
    ctx.mp.setattr(device_module, "cuda_available", lambda: False)
    return raised(lambda: device_module.resolve_device("cuda"))


def fallback_warning(ctx):
    ctx.mp.setattr(device_module, "cuda_available", lambda: False)
    return device_module.resolve_device_with_fallback("cuda")[1]


def budget_env(ctx):
    ctx.mp.setenv(handlers.MEMORY_BUDGET_ENV, "a lot")
    return handlers.memory_budget()[1]


def worker_without_model(ctx):
    return worker.describe_error(worker._UserError(worker.NO_MODEL))


def disk_full(ctx):
    def full(*_a):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    ctx.mp.setattr(os, "fsync", full)
    return export_error(ctx, lambda: ex.export_matrix(np.zeros((2, 2)), ctx.tmp / "m.npy"))


def temp_denied(ctx):
    def denied(*_a, **_kw):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    ctx.mp.setattr(atomic_write.tempfile, "mkstemp", denied)
    return export_error(ctx, lambda: ex.export_matrix(np.zeros((2, 2)), ctx.tmp / "m.csv"))


def not_writable(ctx):
    ctx.mp.setattr(os, "access", lambda *_a: False)
    return export_error(ctx, lambda: ex.check_writable(ctx.tmp / "m.csv"))


def qt_widget():
    from PySide6.QtWidgets import QApplication, QWidget

    QApplication.instance() or QApplication([])
    return QWidget()


def small_vocab_ckpt(ctx) -> str:
    from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint

    path = ctx.tmp / "small_vocab.safetensors"
    if not path.exists():
        save_checkpoint(GPT(GPTConfig(n_layer=1, n_head=1, n_embd=8, block_size=16, vocab_size=100)).eval(), str(path))
    return str(path)


def gen(ctx, text=None, **kw):
    from transformer_viewer.model.analysis.generate import generate

    return raised(lambda: generate(session_with(ctx, PROMPT if text is None else text), **{"n_tokens": 2, **kw}))


def heads_error(ctx, **kw):
    from transformer_viewer.model.analysis.heads import detect_heads

    return raised(lambda: detect_heads(ctx.session(), **kw))


def too_few_tokens(ctx):
    from transformer_viewer.model.analysis.heads import repeated_random_tokens

    return raised(lambda: repeated_random_tokens(ctx.session().model, 10**6, 1, 0))


def lens_error(ctx, kind):
    from transformer_viewer.model.analysis.lens import logit_lens

    s = session_with(ctx, PROMPT)
    s.run()
    if kind == "streams":
        return raised(lambda: logit_lens(s, residuals=s.residuals()[:1]))
    if kind == "reference":
        return raised(lambda: logit_lens(s, reference_ids=np.zeros((1, 1))))
    if kind == "mask":
        return raised(lambda: s.masked_residuals(np.zeros((5, 5))))
    return raised(lambda: s.masked_residuals(ablation="half"))


def intervention_error(ctx, kind):
    from transformer_viewer.model.capture.interventions import Intervention

    s = session_with(ctx, PROMPT)
    if kind == "beside":
        return raised(lambda: s.run(Intervention.none(s.config), "mean"))
    mixed = [Intervention.make(s.config, None, "zero"), Intervention.make(s.config, None, "mean")]
    return raised(lambda: s.predict_many(mixed))


def scan_error(ctx, kind):
    from transformer_viewer.model.analysis.scan import head_scan

    s = session_with(ctx, PROMPT)
    if kind == "ablation":
        return raised(lambda: head_scan(s, ablation="half"))
    if kind == "base":
        return raised(lambda: head_scan(s, base_mask=np.zeros((1, 1))))
    if kind == "target":
        return raised(lambda: head_scan(s, target=10**9))
    if kind == "same":
        return raised(lambda: head_scan(s, target=5, distractor=5))
    return raised(lambda: head_scan(s).ranked(by="colour"))


def diff_error(ctx, kind):
    import dataclasses

    from transformer_viewer.model.analysis.diff import lens_diff, subtract, trace_diff
    from transformer_viewer.model.analysis.lens import logit_lens

    if kind == "shapes":
        return raised(lambda: subtract(np.zeros(2), np.zeros(3)))
    s = session_with(ctx, PROMPT)
    a = s.run()
    if kind == "lens":
        clean = logit_lens(s)
        other = logit_lens(s, reference_ids=np.zeros(clean.top_ids.shape, dtype=np.int64) + 7)
        return raised(lambda: lens_diff(clean, other))
    if kind == "position":
        return raised(lambda: trace_diff(a, s.run(position=0)))
    b = session_with(ctx, "Another prompt entirely").run()
    assert dataclasses.is_dataclass(b)
    return raised(lambda: trace_diff(a, b))


def data_error(ctx, kind):
    from transformer_viewer.model.training.data import load_corpus

    if kind == "none":
        return raised(lambda: load_corpus([]))
    if kind == "missing":
        return raised(lambda: load_corpus([str(ctx.tmp / "missing.txt")]))
    if kind == "unreadable":
        from tests.helpers.failing_open import refuse_reads_of

        (ctx.tmp / "locked.txt").write_text("hello")
        refuse_reads_of(ctx.mp, str(ctx.tmp / "locked.txt"))
        return raised(lambda: load_corpus([str(ctx.tmp / "locked.txt")]))
    if kind == "xz":
        (ctx.tmp / "bad.xz").write_bytes(b"not xz at all")
        return raised(lambda: load_corpus([str(ctx.tmp / "bad.xz")]))
    (ctx.tmp / "t.txt").write_text("hello world")
    return raised(lambda: load_corpus([str(ctx.tmp / "t.txt")], val_fraction=2))


def train_error(ctx, kind):
    from transformer_viewer.model.training.data import load_corpus
    from transformer_viewer.model.training.train import TrainConfig, check_data, train

    (ctx.tmp / "t.txt").write_text("The cat sat on the mat. " * 40)
    corpus = load_corpus([str(ctx.tmp / "t.txt")], val_fraction=0.1)
    if kind == "split":
        return raised(lambda: check_data(corpus, 4096))
    config = GPTConfig(n_layer=1, n_head=1, n_embd=8, block_size=8)
    out = str(ctx.tmp / "never-written.safetensors")
    return raised(lambda: train(corpus, config, TrainConfig(steps=1), out, resume=True))


def train_onto_existing(ctx):
    (ctx.tmp / "t.txt").write_text("The cat sat on the mat. " * 40)
    return ctx.cli("train", "--data", str(ctx.tmp / "t.txt"), "--out", ctx.ckpt, "--steps", "1")


def heads_cli(ctx, *extra):
    return ctx.cli("heads", "--checkpoint", ctx.ckpt, *extra)


def heads_without_bundled(ctx):
    from transformer_viewer.model.checkpoints import checkpoint

    ctx.mp.setattr(checkpoint, "bundled_checkpoint_path", lambda: str(ctx.tmp / "no-bundled.safetensors"))
    return ctx.cli("heads")


def text_file(ctx, content):
    path = ctx.tmp / ("text.txt" if content else "empty.txt")
    path.write_text(content)
    return str(path)


def export_button_without_data(ctx):
    qt_widget()
    from transformer_viewer.viewer.views.parts import ExportButton

    class EmptyView:
        def matrix(self):
            return np.zeros((0, 0))

    button = ExportButton(EmptyView(), "empty")
    messages = []
    button.failed.connect(messages.append)
    from tests.helpers.hardening import Dialogs

    Dialogs(ctx.mp)
    assert button.export(str(ctx.tmp / "x.npy")) is None
    return messages[-1]


PROMPT = "The cat sat on the mat"
CASES = [
    # -- the session ---------------------------------------------------------------------
    Case("empty prompt, run", lambda c: raised(session_with(c, "").run), "the prompt is empty; type some text first"),
    Case("empty prompt, predict", lambda c: raised(session_with(c, "").predict), "the prompt is empty"),
    Case("mask of the wrong shape", lambda c: raised(lambda: session_with(c, PROMPT).run(np.zeros((3, 3)))),
         "head mask has shape (3, 3); this model needs (2, 2)"),
    Case("position past the prompt", lambda c: raised(lambda: session_with(c, PROMPT).run(position=99)),
         "position 99 is outside the prompt's 6 tokens"),
    Case("unknown ablation, run", lambda c: raised(lambda: session_with(c, PROMPT).run(ablation="half")),
         "ablation must be one of zero, mean, got 'half'"),
    Case("unknown ablation, predict", lambda c: raised(lambda: session_with(c, PROMPT).predict(ablation="half")),
         "ablation must be one of zero, mean"),
    Case("an ablation beside an Intervention", lambda c: intervention_error(c, "beside"),
         "pass the ablation inside the Intervention, not beside it"),
    Case("a batch of predictions under two ablations", lambda c: intervention_error(c, "mixed"),
         "the interventions of one batch of predictions must share one ablation"),
    Case("token outside a small vocabulary", small_vocab_session, "outside this model's vocabulary of 100"),
    Case("tokens past the context", too_many_tokens, "101 tokens do not fit the model's context of 64"),
    Case("residuals before a run", lambda c: raised(c.session().residuals), "no run yet; call run() first"),
    Case("capture over budget", lambda c: budget(c, True), "shorten the prompt to 20 tokens or fewer"),
    Case("budget fitting nothing", lambda c: budget(c, False), "not even one token fits"),
    # -- checkpoints beyond the corpus ---------------------------------------------------------
    Case("bundled model missing", bundled_missing, "the bundled model is not installed"),
    Case("bundled model missing in the app", handler_bundled_missing, "open a checkpoint with File > Open checkpoint"),
    Case("not a regular file", lambda c: raised(lambda: load_checkpoint("/dev/null")), "not a regular file or folder"),
    Case("cached model name not downloaded", not_downloaded, "transformer-viewer never downloads"),
    Case("cached config without weights", cache_without_weights, "has its config.json but not its weights"),
    Case("GPT-2 weights without a config", gpt2_weights_without_config, "weights without their config"),
    Case("untied HF config without lm_head", untied_without_head, "tie_word_embeddings=false"),
    Case("tutorial --n-head not dividing", tutorial_bad_heads, "--n-head 5 does not divide n_embd=16"),
    Case("a disk error at the first read", lambda c: io_error(c, "first"),
         "cannot be read (Input/output error); check the path"),
    Case("a disk error reading the header", lambda c: io_error(c, "second"), "cannot be read (Input/output error)"),
    Case("a disk error inside a torch zip", lambda c: io_error(c, "zip"), "cannot be read (Input/output error)"),
    Case("unreadable file", lambda c: unreadable(c, "file"), "permission denied; make the file readable (chmod +r)"),
    Case("unreadable folder", lambda c: unreadable(c, "folder"), "permission denied listing the folder"),
    Case("unreadable config.json", lambda c: unreadable(c, "config"), "config.json: permission denied; make it readable"),
    # -- devices ------------------------------------------------------------------------------------
    Case("CUDA absent", no_cuda, "CUDA was requested but no CUDA device is available here; use --device cpu"),
    Case("CUDA absent, app fallback", fallback_warning, "; running on CPU instead"),
    Case("unknown device", lambda c: raised(lambda: device_module.resolve_device("tpu")), "unknown device 'tpu'"),
    Case("unknown dtype", lambda c: raised(lambda: device_module.resolve_dtype("int8", torch.device("cpu"))),
         "unknown dtype 'int8'"),
    Case("half precision on the CPU", lambda c: raised(lambda: device_module.resolve_dtype("float16", torch.device("cpu"))),
         "float16 is supported on CUDA only"),
    # -- the command line -----------------------------------------------------------------------------
    Case("--mask garbage", lambda c: c.cli("predict", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--mask", "1x"),
         "bad --mask '1x'"),
    Case("--mask layer", lambda c: c.cli("predict", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--mask", "5.0"),
         "layer 5 does not exist"),
    Case("--mask head", lambda c: c.cli("predict", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--mask", "0.9"),
         "head 9 does not exist"),
    Case("--top-k 0", lambda c: c.cli("predict", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--top-k", "0"),
         "--top-k must be at least 1"),
    Case("--position 99", lambda c: c.cli("predict", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--position", "99"),
         "position 99 is outside"),
    Case("predict empty prompt", lambda c: c.cli("predict", "--checkpoint", c.ckpt, "--prompt", ""), "the prompt is empty"),
    Case("--screenshot not png", lambda c: c.cli("--screenshot", str(c.tmp / "shot.jpg")), "the screenshot is a PNG"),
    Case("export --layer", lambda c: c.cli("export", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--layer", "7",
                                           "--out", str(c.tmp / "a.png")), "--layer 7 does not exist"),
    Case("export --query", lambda c: c.cli("export", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--query", "40",
                                           "--out", str(c.tmp / "a.npy")), "--query 40 is outside the prompt's"),
    Case("export --out .gif", lambda c: c.cli("export", "--checkpoint", c.ckpt, "--prompt", PROMPT,
                                              "--out", str(c.tmp / "a.gif")), "use a file name ending in"),
    # -- export --------------------------------------------------------------------------------------------
    Case("export unknown extension", lambda c: export_error(c, lambda: ex.extension("x.gif")), "cannot export to 'x.gif'"),
    Case("export into a missing folder", lambda c: export_error(c, lambda: ex.check_writable(c.tmp / "nope" / "a.png")),
         "does not exist; create it or choose another"),
    Case("export onto a folder", lambda c: export_error(c, lambda: ex.check_writable(c.tmp)), "it is a folder"),
    Case("export into a read-only folder", not_writable, "is not writable"),
    Case("export with a NUL in the name", lambda c: export_error(c, lambda: ex.check_writable("a\x00b.png")),
         "cannot contain a NUL character"),
    Case("export, temp file denied", temp_denied, "Permission denied; choose a folder you can write to"),
    Case("export on a full disk", disk_full, "No space left on device; check the disk"),
    Case("export 3-D as CSV", lambda c: export_error(c, lambda: ex.export_matrix(np.zeros((2, 2, 2)), c.tmp / "m.csv")),
         "CSV holds a 2-D matrix"),
    Case("export with wrong labels", lambda c: export_error(
        c, lambda: ex.export_matrix(np.zeros((2, 2)), c.tmp / "m.csv", ["a"], ["b", "c"])), "1 row and 2 column labels"),
    Case("export_matrix to .png", lambda c: export_error(c, lambda: ex.export_matrix(np.zeros(2), c.tmp / "m.png")),
         "export_matrix writes .npy or .csv"),
    Case("export_png to .svg", lambda c: export_error(c, lambda: ex.export_png(qt_widget(), c.tmp / "m.svg")),
         "export_png writes .png files"),
    Case("export_svg to .png", lambda c: export_error(c, lambda: ex.export_svg(qt_widget(), c.tmp / "m.png")),
         "export_svg writes .svg files"),
    Case("export scale out of range", lambda c: export_error(c, lambda: ex.export_png(qt_widget(), c.tmp / "m.png",
                                                                                      scale=100)), "is out of range"),
    Case("export a non-widget", lambda c: export_error(c, lambda: ex.export_png(object(), c.tmp / "m.png")),
         "cannot render a object as an image"),
    Case("export a view without a matrix", lambda c: export_error(c, lambda: ex.export_view(qt_widget(), c.tmp / "m.npy")),
         "has no matrix to write"),
    Case("File > Export before any run", lambda c: window_export_without_trace(c, "heatmap", str(c.tmp / "a.png")),
         "nothing to export yet: load a model and run a prompt first"),
    Case("File > Export the grid as .npy", window_export_grid_as_npy, "the heads grid exports as .png, .svg or .pdf"),
    Case("a view's Export before it drew", window_export_of_an_empty_view,
         "nothing to export yet: this view has drawn nothing"),
    # -- analysis: generation, head detection, logit lens, scans, diffs ---------------------------------------
    Case("generate a negative count", lambda c: gen(c, n_tokens=-1), "the number of tokens to generate must be between 0"),
    Case("generate at a negative temperature", lambda c: gen(c, temperature=-1.0), "temperature must be 0 (greedy)"),
    Case("generate with top-k 0", lambda c: gen(c, temperature=1.0, top_k=0), "top-k must be at least 1, got 0"),
    Case("generate with a bad ablation", lambda c: gen(c, ablation="half"), "ablation must be one of zero, mean"),
    Case("generate with a bad mask", lambda c: gen(c, mask=np.zeros((4, 4))), "head mask has shape (4, 4)"),
    Case("generate from nothing", lambda c: gen(c, text=""), "the prompt is empty"),
    Case("head detection on empty text", lambda c: heads_error(c, texts=[""]), "natural text for head detection is empty"),
    Case("head detection past the context", lambda c: heads_error(c, induction_length=40),
         "repeated twice needs 81 positions; the model's context is 64"),
    Case("head detection beyond the vocabulary", lambda c: raised(lambda: __import__(
        "transformer_viewer.model.analysis.heads", fromlist=["detect_heads"]).detect_heads(
        Session(load_checkpoint(small_vocab_ckpt(c))), texts=["hello world"])), "outside this model's vocabulary of 100"),
    Case("too few distinct tokens", too_few_tokens, "usable tokens; use a repeated sequence of at most that length"),
    Case("logit lens with missing streams", lambda c: lens_error(c, "streams"), "the logit lens needs 3 residual streams"),
    Case("logit lens with bad reference ids", lambda c: lens_error(c, "reference"), "reference_ids has shape (1, 1)"),
    Case("masked lens with a bad mask", lambda c: lens_error(c, "mask"), "head mask has shape (5, 5)"),
    Case("masked lens with a bad ablation", lambda c: lens_error(c, "ablation"), "ablation must be one of"),
    Case("scan with a bad ablation", lambda c: scan_error(c, "ablation"), "ablation must be one of"),
    Case("scan with a bad base mask", lambda c: scan_error(c, "base"), "base mask has shape (1, 1)"),
    Case("scan a target past the vocabulary", lambda c: scan_error(c, "target"), "target token id 1000000000 is outside"),
    Case("scan target equals distractor", lambda c: scan_error(c, "same"), "the distractor is the target token"),
    Case("scan sorted by nonsense", lambda c: scan_error(c, "sort"), "sort by one of"),
    Case("diff of different shapes", lambda c: diff_error(c, "shapes"), "cannot compare arrays of shapes (2,) and (3,)"),
    Case("diff of different prompts", lambda c: diff_error(c, "prompts"), "the clean and masked runs are of different prompts"),
    Case("diff at different positions", lambda c: diff_error(c, "position"), "predict at different positions"),
    Case("lens diff without reference ids", lambda c: diff_error(c, "lens"), "must be computed with reference_ids"),
    Case("analysis export with no data", export_button_without_data, "nothing to export yet: run a prompt first"),
    Case("export --diff with nothing masked or clamped",
         lambda c: c.cli("export", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--view", "residual", "--diff",
                         "--out", str(c.tmp / "r.png")),
         "--diff shows the intervened run minus the clean one: mask a head or clamp a feature"),
    Case("export --rows 0", lambda c: c.cli("export", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--view", "mlp",
                                            "--rows", "0", "--out", str(c.tmp / "m.png")), "--rows must be at least 1"),
    Case("export --colormap nonsense", lambda c: c.cli("export", "--checkpoint", c.ckpt, "--prompt", PROMPT,
                                                       "--colormap", "no-such-map", "--out", str(c.tmp / "c.png")),
         "--colormap: "),
    # -- heads, scan and train commands ---------------------------------------------------------------------
    Case("heads --top 0", lambda c: heads_cli(c, "--top", "0"), "--top must be at least 1, got 0"),
    Case("heads --batch 0", lambda c: heads_cli(c, "--batch", "0"), "--batch must be at least 1, got 0"),
    Case("heads --length 0", lambda c: heads_cli(c, "--length", "0"), "--length must be at least 1, got 0"),
    Case("heads --text missing", lambda c: heads_cli(c, "--text", str(c.tmp / "none.txt")), "text file not found"),
    Case("heads --text empty", lambda c: heads_cli(c, "--text", text_file(c, "")), "the text file is empty"),
    Case("heads without any model", heads_without_bundled, "the bundled model is not installed; pass --checkpoint"),
    Case("scan --top 0", lambda c: c.cli("scan", "--checkpoint", c.ckpt, "--prompt", PROMPT, "--top", "0"),
         "--top must be at least 1"),
    Case("scan an empty prompt", lambda c: c.cli("scan", "--checkpoint", c.ckpt, "--prompt", ""),
         "the prompt is empty; pass some text with --prompt"),
    Case("scan --target id out of range", lambda c: c.cli("scan", "--checkpoint", c.ckpt, "--prompt", PROMPT,
                                                          "--target", "99999999"), "token ids run from 0 to 50256"),
    Case("scan --target of two tokens", lambda c: c.cli("scan", "--checkpoint", c.ckpt, "--prompt", PROMPT,
                                                        "--target", "hello world"), "is 2 GPT-2 tokens"),
    Case("scan --target past a small vocabulary", lambda c: c.cli("scan", "--checkpoint", small_vocab_ckpt(c),
                                                                  "--prompt", "!#%", "--target", " Paris"),
         "' Paris' is token 6342, outside this model's vocabulary of 100"),
    Case("train --steps 0", lambda c: c.cli("train", "--data", "x.txt", "--out", "o.safetensors", "--steps", "0"),
         "--steps must be at least 1"),
    Case("train --lr 0", lambda c: c.cli("train", "--data", "x.txt", "--out", "o.safetensors", "--lr", "0"),
         "--lr must be positive"),
    Case("train --warmup -1", lambda c: c.cli("train", "--data", "x.txt", "--out", "o.safetensors", "--warmup", "-1"),
         "--warmup and --threads cannot be negative"),
    Case("train --val-fraction 2", lambda c: c.cli("train", "--data", "x.txt", "--out", "o.safetensors",
                                                   "--val-fraction", "2"), "--val-fraction must be between 0 and 1"),
    Case("train --embed-init-std 0", lambda c: c.cli("train", "--data", "x.txt", "--out", "o.safetensors",
                                                    "--embed-init-std", "0"),
         "--embed-init-std must be a positive standard deviation (at most 10), got 0.0"),
    Case("training data: none", lambda c: data_error(c, "none"), "no data files given"),
    Case("training data: missing", lambda c: data_error(c, "missing"), "data file not found"),
    Case("training data: unreadable", lambda c: data_error(c, "unreadable"), "cannot read the data file (Permission"),
    Case("training data: broken .xz", lambda c: data_error(c, "xz"), "not a valid .xz file"),
    Case("training data: bad fraction", lambda c: data_error(c, "fraction"), "the validation fraction must be between"),
    Case("training data shorter than the context", lambda c: train_error(c, "split"), "fewer than block_size + 2"),
    Case("resume without a checkpoint", lambda c: train_error(c, "resume"), "no checkpoint to resume from"),
    Case("train --out onto an existing checkpoint", train_onto_existing,
         "already exists: add --resume to continue its run, --overwrite to replace it"),
    # -- the app's worker ------------------------------------------------------------------------------------
    Case("a request before any model", worker_without_model, "no model is loaded; open a checkpoint"),
    Case("a bug in a handler", lambda c: worker.describe_error(KeyError("x")),
         "internal error (KeyError: 'x'); the previous state is kept"),
    Case("out of memory", lambda c: worker.describe_error(MemoryError()), "out of memory; use a shorter prompt"),
    Case("CUDA out of memory", lambda c: worker.describe_error(RuntimeError("CUDA out of memory. Tried to allocate")),
         "out of memory; use a shorter prompt"),
    Case("bad memory budget variable", budget_env, "TV_MEMORY_BUDGET_MB='a lot' is not a positive number of MiB"),
    Case("empty prompt in the app", lambda c: raised(lambda: handlers.handle_trace(
        handlers.WorkerSession(load_checkpoint(c.ckpt)), __import__("transformer_viewer.viewer.worker.requests",
                                                                    fromlist=["TraceRequest"]).TraceRequest(text=""),
        None, None)), "the prompt is empty"),
] + area_cases()


@pytest.fixture(scope="module")
def produced(tmp_path_factory, tiny_ckpt) -> dict[str, object]:
    """Every trigger run once (its own folder and monkeypatch): name -> message, or the exception."""
    loaded = load_checkpoint(tiny_ckpt, device="cpu")
    out: dict[str, object] = {}
    for i, case in enumerate(CASES):
        mp = pytest.MonkeyPatch()
        try:
            out[case.name] = case.trigger(Ctx(tmp_path_factory.mktemp(f"case{i}"), tiny_ckpt, mp, loaded))
        except Exception as e:  # noqa: BLE001 - reported by the case's own test
            out[case.name] = e
        finally:
            mp.undo()
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_message(case, produced):
    message = produced[case.name]
    if isinstance(message, BaseException):
        raise message
    assert isinstance(message, str) and one_line(message), repr(message)
    assert case.expect in message, message


# -- the inventory --------------------------------------------------------------------------------------------
# The only messages no trigger above (or the corpus) produces, each with the reason it cannot be reached from
# outside. Everything else in the source must be produced, so a new or reworded message needs a trigger.
NOT_TRIGGERED = {
    "{}: corrupt safetensors header (not a JSON object); {}":
        "unreachable: the header is parsed only when it starts with '{', and such JSON is always an object",
    "--mode {}: use one of {}": "argparse's choices refuse any other --mode first (exit 2 with usage)",
}


def source_messages() -> list[tuple[str, int, str | None]]:
    """(file, line, template) of every user-error construction; {} stands for each placeholder."""

    def template(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        return None  # built elsewhere (a variable): its pieces are listed where they are made

    found = []
    for folder in ("model", "viewer"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and node.args:
                    f = node.func
                    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                    if name in USER_ERRORS:
                        found.append((str(path.relative_to(ROOT)), node.lineno, template(node.args[0])))
    return found


def as_regex(template: str) -> re.Pattern:
    return re.compile(".*".join(re.escape(part) for part in template.split("{}")), re.DOTALL)


def corpus_messages(corpus) -> list[str]:
    from transformer_viewer.model.errors import CheckpointError

    bad, _marker = corpus
    out = []
    for b in bad:
        try:
            load_checkpoint(b.path)
        except CheckpointError as e:
            out.append(str(e))
    return out


def test_every_message_in_the_source_is_listed(corpus, produced):
    """Each message is produced by a trigger above or the corpus, or is in NOT_TRIGGERED with its reason."""
    produced = [m for m in produced.values() if isinstance(m, str)] + corpus_messages(corpus)
    found = source_messages()
    assert len(found) > 100
    templates = {t for _p, _l, t in found if t is not None}
    unlisted, multi_line, triggered = [], [], 0
    for path, line, template in found:
        if template is None:
            continue
        if "\n" in template:
            multi_line.append(f"{path}:{line}: {template!r}")
        hit = any(as_regex(template).fullmatch(m) for m in produced)
        triggered += hit
        if template in NOT_TRIGGERED:
            assert not hit, f"{template!r} is triggered now: take it out of NOT_TRIGGERED"
        elif not hit:
            unlisted.append(f"{path}:{line}: {template!r}")
    stale = [t for t in NOT_TRIGGERED if t not in templates]
    print(f"\n{len(found)} message sites, {len(templates)} distinct messages; {triggered} sites triggered here, "
          f"{len(NOT_TRIGGERED)} messages unreachable from outside")
    assert not multi_line, "messages must be one line:\n" + "\n".join(multi_line)
    assert not stale, f"no longer in the source, remove from NOT_TRIGGERED: {stale}"
    assert not unlisted, ("messages no trigger in tests/hardening/test_messages.py (or the corpus) produces; "
                          "add a Case:\n" + "\n".join(unlisted))


def test_every_cli_error_is_one_line_on_stderr(capsys):
    """ModelError of any kind through run_guarded: `error: <line>`, exit 2 (KeyboardInterrupt: 130)."""
    from transformer_viewer.viewer.cli.main import run_guarded

    def boom(_args):
        raise ModelError("a one-line message")

    assert run_guarded(boom, None) == 2
    assert capsys.readouterr().err == "error: a one-line message\n"

    def interrupted(_args):
        raise KeyboardInterrupt

    assert run_guarded(interrupted, None) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_the_table_covers_the_tiny_model_it_assumes():
    assert (TINY.n_layer, TINY.n_head, TINY.block_size) == (2, 2, 64)
