"""`transformer-viewer train`: train a small GPT on text with a progress bar; Ctrl-C saves."""

from __future__ import annotations

import argparse
import sys

from transformer_viewer.model.errors import ModelError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", nargs="+", required=True, help="plain text or .xz text files")
    p.add_argument("--out", required=True, help="checkpoint to write (.safetensors)")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"],
                   help="gpt2: LayerNorm, learned positions, GELU MLP; llama: RMSNorm, rotary positions, SwiGLU "
                        "MLP, no biases (the flags below override single switches)")
    p.add_argument("--activation", default=None, choices=["gelu_tanh", "gelu", "relu", "silu"])
    p.add_argument("--positional", default=None, choices=["learned", "sinusoidal", "rotary", "none"],
                   help="learned position embeddings, the fixed sin/cos table, rotary, or none (default: the arch's)")
    p.add_argument("--norm", default=None, choices=["layernorm", "rmsnorm"])
    p.add_argument("--mlp", default=None, choices=["plain", "gated"], help="plain MLP or gated (SwiGLU/GeGLU)")
    p.add_argument("--n-mlp", type=int, default=0,
                   help="MLP hidden size (default: 4 n_embd plain, 8/3 n_embd gated, up to a multiple of 32)")
    p.add_argument("--n-kv-head", type=int, default=0, help="key/value heads for grouped-query attention "
                   "(default: --n-head; must divide it)")
    p.add_argument("--head-dim", type=int, default=0, help="size of each head (default: n_embd / n_head)")
    p.add_argument("--rope-base", type=float, default=10000.0, help="rotary base theta (default 10000)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--val-fraction", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--save-dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                   help="dtype of the final checkpoint (float16 halves the file)")
    p.add_argument("--pos-init", default="normal", choices=["normal", "sinusoidal"],
                   help="start learned positions from N(0, 0.02) (GPT-2) or a scaled sin/cos table")
    p.add_argument("--pos-init-std", type=float, default=0.1,
                   help="std of the sin/cos table that --pos-init sinusoidal starts from (default 0.1)")
    p.add_argument("--embed-init-std", type=float, default=0.02,
                   help="std of the token embedding at the start (default 0.02, GPT-2's)")
    p.add_argument("--full-vocab-loss", action="store_true",
                   help="multiply the head by every vocabulary row, not only tokens the data contains")
    p.add_argument("--freeze-unseen-rows", action="store_true",
                   help="the first active-vocabulary loss: rows of tokens the data lacks stay at zero for good "
                        "(same loss value, constrained training; only to reproduce runs made with it)")
    p.add_argument("--repeat-fraction", type=float, default=0.0,
                   help="fraction of training windows in which a passage of the window is repeated later in it, "
                        "for in-context copying (induction) to pay; validation stays natural text (default 0)")
    p.add_argument("--resume", action="store_true", help="continue from --out")


def run(args) -> int:
    import torch
    from tqdm import tqdm

    from transformer_viewer.model.data import load_corpus
    from transformer_viewer.model.device import resolve_device
    from transformer_viewer.model.train import TrainConfig, TrainingInterrupted, train

    _check_numbers(args)
    _interrupt_on_signals()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    config = model_config(args)
    tc = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup=args.warmup,
                     eval_every=args.eval_every, eval_batches=args.eval_batches, seed=args.seed,
                     save_dtype=args.save_dtype, active_vocab=not args.full_vocab_loss,
                     freeze_unseen=args.freeze_unseen_rows, pos_init=args.pos_init,
                     pos_init_std=args.pos_init_std, embed_init_std=args.embed_init_std,
                     repeat_fraction=args.repeat_fraction)
    corpus = load_corpus(args.data, val_fraction=args.val_fraction)
    print(f"data: {len(corpus.train):,} training tokens, {len(corpus.val):,} validation tokens", file=sys.stderr)
    done, last_val = 0, [float("nan")]
    if args.resume:
        before = _saved_record(args.out)
        done, last_val[0] = int(before.get("steps", 0)), float(before.get("final_val_loss", float("nan")))
        print(f"resuming {args.out} at step {done}: its own model shape is used; training runs to step {tc.steps}",
              file=sys.stderr)
    bar = tqdm(total=tc.steps, initial=min(done, tc.steps), unit="step", dynamic_ncols=True, file=sys.stderr)

    def on_step(info):
        if "val_loss" in info:
            last_val[0] = info["val_loss"]
            bar.write(f"step {info['step']}: train {info['loss']:.3f}  val {info['val_loss']:.3f}", file=sys.stderr)
        bar.n = info["step"]
        bar.set_postfix(loss=f"{info['loss']:.3f}", val=f"{last_val[0]:.3f}", tok_s=f"{info['tokens_per_s']:.0f}")
        bar.refresh()

    argv = ["transformer-viewer", "train", *sys.argv[2:]] if sys.argv[1:2] == ["train"] else command_line(args)
    try:
        record = train(corpus, config, tc, args.out, device=device, resume=args.resume, on_step=on_step, argv=argv)
    except BaseException as e:
        bar.close()  # before any message, so the bar does not redraw over it
        if isinstance(e, TrainingInterrupted):
            print(f"interrupted at step {e.record['steps']}: saved the model so far to {args.out}; "
                  f"continue with --resume", file=sys.stderr)
            return 130  # saved cleanly, but the run is not finished: a script must not take it for done
        if isinstance(e, KeyboardInterrupt):
            print("interrupted before training began; nothing was saved", file=sys.stderr)
            return 130
        raise
    bar.close()
    print(f"saved {args.out}: val loss {record.get('final_val_loss', float('nan')):.3f} nats/token "
          f"(unigram baseline {record['unigram_val_loss']:.3f}), {record['wall_time_s']:.0f} s")
    return 0


def model_config(args):
    """The GPTConfig the flags describe: the --arch preset, then each switch given."""
    from transformer_viewer.model.config import PRESETS, GPTConfig, gated_mlp_width

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
    """The training record in a checkpoint's metadata, without loading its tensors ({} if none)."""
    from transformer_viewer.model.errors import CheckpointError
    from transformer_viewer.model.formats.native import read_metadata, read_training

    meta = read_metadata(path) or {}
    try:
        return read_training(path, meta)
    except CheckpointError:
        return {}
