"""`transformer-viewer scan`: ablate every head in turn and print how much each one matters.

The table is sorted by effect (the change of the metric when the head is ablated, most
negative first: the heads the prediction leans on most), with a tqdm bar on stderr.
"""

from __future__ import annotations

import argparse
import json

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.tokenizers.tokenizer import parse_token
from transformer_viewer.viewer.cli.common import (
    TerminalBar,
    add_ablation_argument,
    add_checkpoint_arguments,
    intervention_from_args,
    load_from_args,
    refuse_non_finite,
)
from transformer_viewer.viewer.cli.token_pair import parse_token_pair


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    p.add_argument("--prompt", required=True, help="the text to run")
    p.add_argument("--target", default=None,
                   help="token whose log-probability is measured: one token of the model's tokenizer as text (e.g. ' Paris') "
                        "or an integer id; digits alone are an id, so write a number token with its space, ' 42' (default: the baseline's top token)")
    p.add_argument("--distractor", default=None,
                   help="measure the logit difference target - distractor (equal to the log-prob difference)")
    p.add_argument("--tokens", nargs="+", default=None, metavar="TOKEN",
                   help="A [B]: the token measured, and its distractor for the logit difference A - B (the spelling "
                        "patch and attribute use; the same as --target A --distractor B)")
    p.add_argument("--position", type=int, default=None,
                   help="token position whose next-token prediction is measured (default: the last; negative counts from the end)")
    add_ablation_argument(p, "how a head is removed (default: zero)")
    p.add_argument("--mask", nargs="*", default=[], metavar="L.H",
                   help="heads ablated in every run, the baseline included (LAYER.HEAD, 0-based; LAYER.* for a layer)")
    p.add_argument("--sort", default="effect", choices=["effect", "abs", "kl"],
                   help="order of the table: effect (largest drop first), abs (largest |effect|), kl (default: effect)")
    p.add_argument("--top", type=int, default=None, help="print only the first N heads")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from transformer_viewer.viewer.cli.common import check_mask_syntax, note_truncated

    if args.top is not None and args.top < 1:
        raise ModelError(f"--top must be at least 1, got {args.top}")
    check_mask_syntax(args.mask)
    if args.tokens is not None and (args.target is not None or args.distractor is not None):
        raise ModelError("give --tokens A [B], or --target and --distractor, not both")
    if args.tokens is not None and len(args.tokens) > 2:
        raise ModelError(f"--tokens takes one token or two (A B for the difference A - B), got {len(args.tokens)}")
    import torch  # only once the arguments are good

    from transformer_viewer.model.analysis.scan import head_scan
    from transformer_viewer.model.capture.session import Session

    loaded = load_from_args(args)
    session = Session(loaded)
    session.set_prompt(args.prompt)
    if session.tokens is None or not session.tokens.ids:
        raise ModelError("the prompt is empty; pass some text with --prompt")
    note_truncated(session.dropped, len(session.tokens.ids), loaded.config.block_size)
    c = loaded.config
    base = intervention_from_args(args, c, what="base mask")
    if args.tokens is not None:
        pair = parse_token_pair(args.tokens, session.tokenizer, session.n_vocab)
        target, distractor = pair[0], (pair[1] if len(pair) == 2 else None)
    else:
        target = parse_token(args.target, session.tokenizer, session.n_vocab, "--target")
        distractor = parse_token(args.distractor, session.tokenizer, session.n_vocab, "--distractor")
    with TerminalBar("head", enabled=not args.no_progress) as bar, torch.inference_mode():
        result = head_scan(session, target=target, distractor=distractor, position=args.position,
                           intervention=base, progress=bar.update)
    measured = result.done  # heads not run are NaN by design
    refuse_non_finite("predictions with heads ablated", result.baseline_metric, result.baseline_target_prob,
                      result.effect[measured], result.kl[measured], result.target_probs[measured])
    order = result.ranked(args.sort)
    if args.top is not None:
        order = order[: args.top]
    tok = session.tokenizer
    if args.json:
        print(json.dumps(_as_json(result, order, session, loaded.name), indent=2))
        return 0
    label = session.tokens.labels[result.position]
    what = f"log p({tok.label(result.target_id)!r})"
    if result.distractor_id is not None:
        what = f"logit({tok.label(result.target_id)!r}) - logit({tok.label(result.distractor_id)!r})"
    print(f"model {loaded.name}: predicting after position {result.position} ({label!r}); "
          f"{result.ablation} ablation; metric {what}; baseline {result.baseline_metric:.4f}"
          + (f"; base mask {' '.join(args.mask)}" if args.mask else ""))
    print(f"{'head':>7} {'effect':>10} {'metric':>10} {'p(target)':>10} {'KL':>10}")
    for layer, head in order:
        print(f"{f'{layer}.{head}':>7} {result.effect[layer, head]:>+10.4f} {result.metric_values[layer, head]:>10.4f} "
              f"{result.target_probs[layer, head]:>10.4g} {result.kl[layer, head]:>10.4g}")
    return 0


def _as_json(result, order, session, name) -> dict:
    tok = session.tokenizer

    def token(i):
        if i is None:
            return None
        return {"id": int(i), "token": tok.token_bytes(i).decode("utf-8", errors="replace"), "label": tok.label(i)}
    return {
        "model": name,
        "prompt": session.tokens.text,
        "position": result.position,
        "ablation": result.ablation,
        "metric": result.metric,
        "target": token(result.target_id),
        "distractor": token(result.distractor_id),
        "base_mask": [f"{la}.{h}" for la, h in zip(*result.base_mask.nonzero(), strict=True)],
        "baseline": {"metric": result.baseline_metric, "target_prob": result.baseline_target_prob},
        "heads": [
            {"layer": la, "head": h, "effect": float(result.effect[la, h]), "metric": float(result.metric_values[la, h]),
             "target_prob": float(result.target_probs[la, h]), "kl": float(result.kl[la, h])}
            for la, h in order
        ],
    }
