"""`transformer-viewer train-sae [CHECKPOINT] --hook blocks.L.hook_resid_post --data FILE... --d-sae N
[--architecture topk --k K | standard --l1 C] --out FOLDER`: train a sparse autoencoder on the
model's activations at one hook point over text, and write it as a SAELens 6 folder.

Activations are computed as training goes, one forward of a few windows at a time, never all
held; the model runs on --device, the SAE trains on the CPU. Ctrl-C stops with nothing written;
the folder appears only once it is complete.
"""

from __future__ import annotations

import argparse
import sys

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import add_checkpoint_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    p.add_argument("--hook", required=True, metavar="NAME",
                   help="hook point to read, e.g. blocks.2.hook_resid_post (hook_resid_pre, hook_resid_mid, "
                        "hook_attn_out, hook_mlp_out, attn.hook_z) (required)")
    p.add_argument("--data", nargs="+", required=True, metavar="FILE",
                   help="UTF-8 text files, plain or .xz; the last --val-fraction of each is held out (required)")
    p.add_argument("--d-sae", type=int, required=True, metavar="N", help="number of features (required)")
    p.add_argument("--architecture", default="topk", choices=["topk", "standard"],
                   help="topk: the K largest features per token; standard: ReLU with an L1 penalty (default: topk)")
    p.add_argument("--k", type=int, default=32, help="topk: features active per token (default: 32)")
    p.add_argument("--l1", type=float, default=5.0,
                   help="standard: L1 coefficient, on activations scaled to mean norm sqrt(d_in) (default: 5)")
    p.add_argument("--out", required=True, metavar="FOLDER", help="SAE folder to write (required)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing SAE folder at --out (default: refuse)")
    p.add_argument("--steps", type=int, default=1000, help="optimizer steps (default: 1000)")
    p.add_argument("--batch-tokens", type=int, default=4096, help="activations per step (default: 4096)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak Adam learning rate, then cosine decay (default: 1e-3)")
    p.add_argument("--warmup", type=int, default=50, help="steps of linear learning-rate warm-up (default: 50)")
    p.add_argument("--context-size", type=int, default=0,
                   help="tokens per window the model runs, the BOS included (default: the model's context)")
    p.add_argument("--windows-per-forward", type=int, default=32,
                   help="windows run in one forward: the memory the activations take (default: 32)")
    p.add_argument("--val-fraction", type=float, default=0.05,
                   help="share of each file held out for evaluation and labels (default: 0.05)")
    p.add_argument("--eval-windows", type=int, default=256,
                   help="validation windows the FVU, L0, dead features and labels are measured on (default: 256)")
    p.add_argument("--eval-every", type=int, default=100, help="steps between evaluations (default: 100)")
    p.add_argument("--labels", type=int, default=0, metavar="N",
                   help="label N features by their top-activating validation tokens: labels.csv in the folder, "
                        "with the validation windows they came from (default: 0, none)")
    p.add_argument("--label-top", type=int, default=20,
                   help="top activations per feature a label is computed from (default: 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initialization and the windows (default: 0)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: 0, torch's choice)")
    p.add_argument("--save-dtype", default="float32", choices=["float32", "float16"],
                   help="dtype of the stored weights; cfg.json says float32, so readers compute in float32 "
                        "(default: float32)")


def _check_numbers(args) -> None:
    for flag, value in (("--windows-per-forward", args.windows_per_forward), ("--eval-windows", args.eval_windows),
                        ("--eval-every", args.eval_every), ("--label-top", args.label_top)):
        if value < 1:
            raise ModelError(f"{flag} must be at least 1, got {value}")
    for flag, value in (("--labels", args.labels), ("--context-size", args.context_size),
                        ("--threads", args.threads), ("--warmup", args.warmup)):
        if value < 0:
            raise ModelError(f"{flag} cannot be negative, got {value}")
    if not 0.0 < args.val_fraction < 1.0:
        raise ModelError(f"--val-fraction must be between 0 and 1, got {args.val_fraction}")


def train_config(args):
    from transformer_viewer.model.training.sae_train import SaeTrainConfig

    return SaeTrainConfig(d_sae=args.d_sae, architecture=args.architecture, k=args.k, l1=args.l1,
                          steps=args.steps, batch_tokens=args.batch_tokens, lr=args.lr, warmup=args.warmup,
                          seed=args.seed)


def run(args) -> int:
    _check_numbers(args)
    from transformer_viewer.model.training.sae_folder import check_out_folder

    check_out_folder(args.out, args.overwrite)
    import torch  # only once the arguments are good

    from transformer_viewer.viewer.cli.common import load_from_args
    from transformer_viewer.viewer.cli.train import _interrupt_on_signals

    _interrupt_on_signals()
    if args.threads:
        torch.set_num_threads(args.threads)
    argv = ["transformer-viewer", *sys.argv[1:]] if sys.argv[1:2] == ["train-sae"] else command_line(args)
    try:
        loaded = load_from_args(args, for_inference=False)
        written = train_and_write(loaded, args, argv)
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        return 130
    print(f"saved {written}")
    return 0


def train_and_write(loaded, args, argv: list[str]) -> str:
    """Train on the arguments' data at their hook and write the folder; returns its path."""
    import torch

    from transformer_viewer.model.training import sae_activations as acts
    from transformer_viewer.model.training.sae_folder import (
        LABEL_TOKENS_FILE,
        LABELS_FILE,
        saelens_config,
        write_sae_folder,
    )
    from transformer_viewer.model.training.sae_train import measure, train_sae

    model, config, tokenizer = loaded.model, loaded.config, loaded.tokenizer
    model.eval()
    cfg = train_config(args)
    site = acts.hook_site(model, args.hook)
    cfg.check(site.d_in)
    context = args.context_size or config.block_size
    prefix = tuple(tokenizer.prefix)
    if not len(prefix) < context <= config.block_size:
        raise ModelError(f"--context-size must be between {len(prefix) + 1} and the model's context of "
                         f"{config.block_size}, got {context}")
    body = context - len(prefix)
    corpus = acts.tokenized_corpus(args.data, args.val_fraction, tokenizer, config.vocab_size)
    print(f"data: {len(corpus.train):,} training tokens, {len(corpus.val):,} validation tokens; "
          f"{args.hook} is {site.d_in} wide", file=sys.stderr)
    device = next(model.parameters()).device
    starts = acts.evenly_spaced_windows(len(corpus.val), body, args.eval_windows)
    eval_windows = acts.windows_at(corpus.val, starts, body, (), "cpu").numpy()  # (n, body)
    eval_chunks = [acts.activations(model, site, acts.windows_at(corpus.val, starts[a : a + args.windows_per_forward],
                                                                 body, prefix, device), len(prefix)).cpu()
                   for a in range(0, len(starts), args.windows_per_forward)]
    gen = torch.Generator().manual_seed(args.seed)
    stream = (x.cpu() for x in acts.stream(model, site, corpus.train, context, prefix, args.windows_per_forward, gen))
    progress = Progress(cfg.steps)
    try:
        weights, record = train_sae(stream, site.d_in, cfg, eval_chunks, on_step=progress.on_step,
                                    eval_every=args.eval_every)
    finally:
        progress.close()
    # The quality of the SAE as saved (rounded to --save-dtype), not of the float32 weights trained.
    encode, decode = saved_encoder(weights, args.architecture, args.k, args.save_dtype), \
        saved_decoder(weights, args.save_dtype)
    quality = measure(encode, decode, eval_chunks, cfg.d_sae)
    record.update(final_fvu=quality.fvu, final_l0=quality.l0, final_dead=quality.dead)
    extra = {}
    if args.labels:
        extra = label_files(model, site, weights, cfg.d_sae, eval_windows, prefix, tokenizer, args)
        extra_names = f" and {LABELS_FILE}, {LABEL_TOKENS_FILE}"
    else:
        extra_names = ""
    metadata = {"model_name": loaded.name, "hook_name": args.hook, "context_size": context,
                "prepend_bos": bool(prefix),
                "training": {"command": argv, "data": list(corpus.files), "train_tokens_available": len(corpus.train),
                             "val_tokens": len(corpus.val), "bos_positions_excluded": bool(prefix), **record}}
    out_cfg = saelens_config(site.d_in, cfg.d_sae, cfg.architecture, cfg.k, metadata, reshape=site.reshape)
    path = write_sae_folder(args.out, out_cfg, weights, args.save_dtype, extra, overwrite=args.overwrite)
    print(f"FVU {record['final_fvu']:.4f}, L0 {record['final_l0']:.1f}, {record['final_dead']} dead features of "
          f"{cfg.d_sae} over {record['eval_tokens']:,} validation tokens; {record['wall_time_s']:.0f} s"
          f"{extra_names}", file=sys.stderr)
    return path


def label_files(model, site, weights, d_sae, windows, prefix, tokenizer, args) -> dict[str, bytes]:
    """labels.csv for `--labels` features, and the validation windows they were computed on."""
    import torch
    from safetensors.torch import save

    from transformer_viewer.model.training.sae_labels import (
        feature_labels,
        labels_csv,
        token_string,
        top_activations,
    )

    encode = saved_encoder(weights, args.architecture, args.k, args.save_dtype)
    tops = top_activations(model, site, encode, d_sae, windows, prefix, args.label_top)
    labels = feature_labels(tops, token_string(tokenizer), args.labels)
    tokens = save({"tokens": torch.from_numpy(windows.astype("int32"))},
                  metadata={"what": "the validation windows labels.csv was computed on", "hook": site.name,
                            "label_top": str(args.label_top), "prefix": ",".join(map(str, prefix))})
    return {"labels.csv": labels_csv(labels), "label_tokens.safetensors": tokens}


def saved_encoder(weights, architecture: str, k: int, save_dtype: str):
    """The encoder of the weights as they are saved (rounded to --save-dtype), computed in float32:
    the labels describe the SAE the folder holds."""
    import torch

    dtype = {"float32": torch.float32, "float16": torch.float16}[save_dtype]
    w = {name: t.to(dtype).float() for name, t in weights.items()}

    def encode(x):
        pre = (x - w["b_dec"]) @ w["W_enc"] + w["b_enc"]  # (N, d_sae)
        if architecture == "standard":
            return torch.relu(pre)
        top = pre.topk(k, dim=-1, sorted=False)
        return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
    return encode


def saved_decoder(weights, save_dtype: str):
    import torch

    dtype = {"float32": torch.float32, "float16": torch.float16}[save_dtype]
    w_dec, b_dec = weights["W_dec"].to(dtype).float(), weights["b_dec"].to(dtype).float()
    return lambda f: f @ w_dec + b_dec  # (N, d_in)


class Progress:
    """A tqdm bar on a terminal; elsewhere only the evaluation lines, each once."""

    def __init__(self, total: int):
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr)

    def on_step(self, info: dict) -> None:
        if "val_fvu" in info:
            line = (f"step {info['step']}: loss {info['loss']:.4f}  val FVU {info['val_fvu']:.4f}  "
                    f"L0 {info['val_l0']:.1f}  dead {info['val_dead']}")
            if self.bar is None:
                print(line, file=sys.stderr, flush=True)
            else:
                self.bar.write(line, file=sys.stderr)
        if self.bar is not None:
            self.bar.n = info["step"]
            self.bar.set_postfix(loss=f"{info['loss']:.4f}", dead=info["dead"])
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def command_line(args) -> list[str]:
    """Every flag spelled out, for the record when we were not run from the shell (tests, scripts)."""
    out = ["transformer-viewer", "train-sae"] + ([args.checkpoint] if args.checkpoint else [])
    out += ["--data", *args.data]
    for key, value in sorted(vars(args).items()):
        if key in ("data", "checkpoint", "checkpoint_positional") or value is False or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out
