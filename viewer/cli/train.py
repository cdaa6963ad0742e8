"""`transformer-viewer train`: train a small GPT on text with a progress bar; Ctrl-C saves."""

from __future__ import annotations

import argparse
import sys

from transformer_viewer.model.errors import ModelError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", nargs="+", required=True, metavar="FILE",
                   help="UTF-8 text files, plain or .xz; the last --val-fraction of each is held out (required)")
    p.add_argument("--out", required=True, metavar="CKPT.safetensors",
                   help="checkpoint to write, also at every evaluation (required). While training, the "
                        "optimizer's state goes beside it as CKPT.safetensors.optim, so --resume continues "
                        "exactly; it is removed when training finishes unless --keep-optimizer")
    p.add_argument("--n-layer", type=int, default=4, help="transformer blocks (default: 4)")
    p.add_argument("--n-head", type=int, default=8, help="attention heads per block (default: 8)")
    p.add_argument("--n-embd", type=int, default=128, help="residual-stream width; a multiple of --n-head (default: 128)")
    p.add_argument("--block-size", type=int, default=256, help="context length in tokens (default: 256)")
    p.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"],
                   help="gpt2: LayerNorm, learned positions, GELU MLP; llama: RMSNorm, rotary positions, SwiGLU "
                        "MLP, no biases; the flags below override single switches (default: gpt2)")
    p.add_argument("--activation", default=None, choices=["gelu_tanh", "gelu", "relu", "silu"],
                   help="MLP activation: GPT-2's tanh GELU, the exact GELU, ReLU or SiLU (default: the arch's)")
    p.add_argument("--positional", default=None, choices=["learned", "sinusoidal", "rotary", "none"],
                   help="learned position embeddings, the fixed sin/cos table, rotary, or none (default: the arch's)")
    p.add_argument("--norm", default=None, choices=["layernorm", "rmsnorm"],
                   help="LayerNorm or RMSNorm (default: the arch's)")
    p.add_argument("--mlp", default=None, choices=["plain", "gated"],
                   help="plain MLP or gated (SwiGLU/GeGLU) (default: the arch's)")
    p.add_argument("--n-mlp", type=int, default=0,
                   help="MLP hidden size (default: 4 n_embd plain, 8/3 n_embd gated, up to a multiple of 32)")
    p.add_argument("--n-kv-head", type=int, default=0, help="key/value heads for grouped-query attention "
                   "(default: --n-head; must divide it)")
    p.add_argument("--head-dim", type=int, default=0, help="size of each head (default: n_embd / n_head)")
    p.add_argument("--rope-base", type=float, default=10000.0, help="rotary base theta (default: 10000)")
    p.add_argument("--steps", type=int, default=2000, help="optimizer steps in all, counting resumed ones (default: 2000)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences of --block-size tokens per step (default: 16)")
    p.add_argument("--lr", type=float, default=3e-3,
                   help="peak AdamW learning rate, reached after --warmup, then cosine decay (default: 3e-3)")
    p.add_argument("--warmup", type=int, default=100, help="steps of linear learning-rate warm-up (default: 100)")
    p.add_argument("--eval-every", type=int, default=200,
                   help="steps between validation losses and checkpoint snapshots (default: 200)")
    p.add_argument("--eval-batches", type=int, default=20, help="validation batches per evaluation (default: 20)")
    p.add_argument("--val-fraction", type=float, default=0.05,
                   help="share of each file held out for validation, between 0 and 1 (default: 0.05)")
    p.add_argument("--seed", type=int, default=1337, help="seed of the initialization and the batches (default: 1337)")
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"], help="where to train (default: cpu)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: 0, torch's choice)")
    p.add_argument("--save-dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                   help="dtype of the final checkpoint; float16 halves the file (default: float32)")
    p.add_argument("--pos-init", default="normal", choices=["normal", "sinusoidal"],
                   help="start learned positions from N(0, 0.02) (GPT-2) or a scaled sin/cos table (default: normal)")
    p.add_argument("--pos-init-std", type=float, default=0.1,
                   help="std of the sin/cos table that --pos-init sinusoidal starts from (default: 0.1)")
    p.add_argument("--embed-init-std", type=float, default=0.02,
                   help="std of the token embedding at the start (default: 0.02, GPT-2's)")
    p.add_argument("--full-vocab-loss", action="store_true",
                   help="multiply the head by every vocabulary row, not only tokens the data contains (default: off)")
    p.add_argument("--freeze-unseen-rows", action="store_true",
                   help="the first active-vocabulary loss: rows of tokens the data lacks stay at zero for good "
                        "(same loss value, constrained training; only to reproduce runs made with it) (default: off)")
    p.add_argument("--repeat-fraction", type=float, default=0.0,
                   help="fraction of training windows in which a passage of the window is repeated later in it, "
                        "for in-context copying (induction) to pay; validation stays natural text (default: 0)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run saved in --out (its model shape, its optimizer state when the .optim "
                        "file is there) up to --steps (default: off)")
    p.add_argument("--overwrite", action="store_true",
                   help="start a new run over an existing --out file, replacing it (default: an existing --out "
                        "is refused unless --resume)")
    p.add_argument("--keep-optimizer", action="store_true",
                   help="keep the .optim file beside the finished checkpoint, to --resume with more --steps "
                        "later (default: off, it is removed)")


def run(args) -> int:
    _check_numbers(args)
    _check_out(args)
    config = model_config(args)
    import torch  # only once the arguments are good

    from transformer_viewer.model.device import resolve_device
    from transformer_viewer.model.training.data import load_corpus
    from transformer_viewer.model.training.train import TrainConfig, TrainingInterrupted, train

    _interrupt_on_signals()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    tc = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup=args.warmup,
                     eval_every=args.eval_every, eval_batches=args.eval_batches, seed=args.seed,
                     save_dtype=args.save_dtype, active_vocab=not args.full_vocab_loss,
                     freeze_unseen=args.freeze_unseen_rows, pos_init=args.pos_init,
                     pos_init_std=args.pos_init_std, embed_init_std=args.embed_init_std,
                     repeat_fraction=args.repeat_fraction)
    before = _saved_record(args.out) if args.resume else {}
    corpus = load_corpus(args.data, val_fraction=args.val_fraction)
    print(f"data: {len(corpus.train):,} training tokens, {len(corpus.val):,} validation tokens", file=sys.stderr)
    done, last_val = 0, [float("nan")]
    if args.resume:
        done, last_val[0] = int(before.get("steps", 0)), float(before.get("final_val_loss", float("nan")))
        print(f"resuming {args.out} at step {done}: its own model shape is used; training runs to step {tc.steps}",
              file=sys.stderr)
    progress = Progress(tc.steps, min(done, tc.steps), last_val[0])
    on_step = progress.on_step

    argv = ["transformer-viewer", "train", *sys.argv[2:]] if sys.argv[1:2] == ["train"] else command_line(args)
    try:
        record = train(corpus, config, tc, args.out, device=device, resume=args.resume, on_step=on_step, argv=argv)
    except BaseException as e:
        progress.close()  # before any message, so the bar does not redraw over it
        if isinstance(e, TrainingInterrupted):
            print(f"interrupted at step {e.record['steps']}: saved the model so far to {args.out}; "
                  f"continue with --resume", file=sys.stderr)
            return 130  # saved cleanly, but the run is not finished: a script must not take it for done
        if isinstance(e, KeyboardInterrupt):
            print("interrupted before training began; nothing was saved", file=sys.stderr)
            return 130
        raise
    progress.close()
    if not args.keep_optimizer:
        _remove_optimizer_state(args.out)
    print(f"saved {args.out}: val loss {record.get('final_val_loss', float('nan')):.3f} nats/token "
          f"(unigram baseline {record['unigram_val_loss']:.3f}), {record['wall_time_s']:.0f} s")
    return 0


class Progress:
    """A tqdm bar on a terminal; elsewhere (a log file, a pipe) only the evaluation lines, each
    once: a bar's carriage-return redraws would repeat in the file."""

    def __init__(self, total: int, initial: int, last_val: float):
        from tqdm import tqdm

        self.last_val = last_val
        self.bar = None
        if sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, file=sys.stderr)

    def on_step(self, info: dict) -> None:
        if "val_loss" in info:
            self.last_val = info["val_loss"]
            line = f"step {info['step']}: train {info['loss']:.3f}  val {info['val_loss']:.3f}"
            if self.bar is None:
                print(line, file=sys.stderr, flush=True)
            else:
                self.bar.write(line, file=sys.stderr)
        if self.bar is not None:
            self.bar.n = info["step"]
            self.bar.set_postfix(loss=f"{info['loss']:.3f}", val=f"{self.last_val:.3f}",
                                 tok_s=f"{info['tokens_per_s']:.0f}")
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _check_out(args) -> None:
    """The checkpoint's folder must exist and be writable, and --resume needs the checkpoint:
    said before any data is read or any step is announced, not at the first snapshot."""
    import os

    from transformer_viewer.viewer.export import check_writable

    check_writable(args.out)
    if args.resume and not os.path.isfile(args.out):
        raise ModelError(f"{args.out}: no checkpoint to resume from; drop --resume to start a new run")
    if os.path.lexists(args.out) and not (args.resume or args.overwrite):
        # The first evaluation's snapshot would replace it: a model the user had, lost.
        raise ModelError(f"{args.out} already exists: add --resume to continue its run, --overwrite to replace it "
                         f"with a new one, or choose another --out")


def _remove_optimizer_state(out: str) -> None:
    """The finished run's .optim file (AdamW moments, twice the model's size) is only needed to
    --resume; the model itself is complete without it."""
    import contextlib
    import os

    from transformer_viewer.model.training.train import _optim_path

    with contextlib.suppress(FileNotFoundError):
        os.remove(_optim_path(out))


def model_config(args):
    """The GPTConfig the flags describe: the --arch preset, then each switch given."""
    from transformer_viewer.model.decoder.config import PRESETS, GPTConfig, gated_mlp_width

    fields = dict(PRESETS[args.arch])
    for name in ("activation", "positional", "norm", "mlp"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    n_mlp = args.n_mlp or (gated_mlp_width(args.n_embd) if fields.get("mlp") == "gated" else 0)
    try:
        return GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
                         n_mlp=n_mlp, n_kv_head=args.n_kv_head, head_dim=args.head_dim, rope_base=args.rope_base,
                         **fields)
    except ValueError as e:
        raise ModelError(str(e)) from None


def _check_numbers(args) -> None:
    """Flags argparse accepts but training cannot use, said before any data is read."""
    positive = {"--steps": args.steps, "--batch-size": args.batch_size, "--eval-every": args.eval_every,
                "--eval-batches": args.eval_batches}
    for flag, value in positive.items():
        if value < 1:
            raise ModelError(f"{flag} must be at least 1, got {value}")
    if not args.lr > 0:
        raise ModelError(f"--lr must be positive, got {args.lr}")
    for flag, value in (("--pos-init-std", args.pos_init_std), ("--embed-init-std", args.embed_init_std)):
        if not 0.0 < value <= 10.0:
            raise ModelError(f"{flag} must be a positive standard deviation (at most 10), got {value}")
    for flag, value in (("--n-mlp", args.n_mlp), ("--n-kv-head", args.n_kv_head), ("--head-dim", args.head_dim)):
        if value < 0:
            raise ModelError(f"{flag} cannot be negative, got {value}")
    if args.warmup < 0 or args.threads < 0:
        raise ModelError("--warmup and --threads cannot be negative")
    if not 0.0 <= args.repeat_fraction <= 1.0:
        raise ModelError(f"--repeat-fraction must be between 0 and 1, got {args.repeat_fraction}")
    if not 0.0 < args.val_fraction < 1.0:
        raise ModelError(f"--val-fraction must be between 0 and 1, got {args.val_fraction}")


def command_line(args) -> list[str]:
    """Every flag spelled out, for the record when we were not run from the shell (tests, the app)."""
    out = ["transformer-viewer", "train", "--data", *args.data]
    for key, value in sorted(vars(args).items()):
        if key == "data" or value is False or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out


def _interrupt_on_signals() -> None:
    """Make Ctrl-C and SIGTERM both save and exit. A job started in the background by a shell
    inherits SIGINT ignored, so the default handler is put back explicitly."""
    import signal

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)


def _saved_record(path: str) -> dict:
    """The training record in a checkpoint's metadata, without loading its tensors ({} if none),
    checked as --resume reads it: a malformed record is one line before any data is read."""
    from transformer_viewer.model.checkpoints.formats.native import read_metadata, read_training
    from transformer_viewer.model.checkpoints.formats.schema import check_resumable

    meta = read_metadata(path) or {}
    return check_resumable(f"{path}: its training record", read_training(path, meta))
