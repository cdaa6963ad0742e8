"""`transformer-viewer predict --checkpoint CKPT --prompt TEXT [--position P] [--top-k K]
[--mask L.H ...] [--ablation zero|mean] [--sae PATH[@HOOK] ... --clamp [SAE:]FEATURE=VALUE|xSCALE[@POSITION] ...]
[--device auto|cpu|cuda] [--json]`: the prompt's tokens and the top-k next tokens at one
position, optionally with attention heads ablated and SAE features clamped.

`--json` prints one object: {"tokens": [{"id", "text"}...], "position": P, "mask": ["L.H"...],
"ablation": "zero"|"mean"|null (null when no head is masked), "clamps": ["SAE:FEATURE=VALUE"...],
"top": [{"id", "token", "prob", "logit"}...]}.
"""

from __future__ import annotations

import argparse
import json

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import add_ablation_argument, add_checkpoint_arguments
from transformer_viewer.viewer.cli.sae_options import add_clamp_argument, add_sae_argument


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    p.add_argument("--prompt", required=True, help="the text to run (<|endoftext|> is the special token)")
    p.add_argument("--position", type=int, default=None,
                   help="token position whose next token is predicted, 0-based; negative counts from the end "
                        "(default: the last token)")
    p.add_argument("--top-k", type=int, default=10, help="how many next tokens to show (default: 10)")
    p.add_argument("--mask", nargs="+", action="extend", default=[], metavar="L.H",
                   help="ablate head H of layer L (0-based), e.g. --mask 3.1 0.2; L.* ablates a whole layer")
    add_ablation_argument(p, "zero: remove the head's output; mean: replace it by its mean over the prompt (default: zero)")
    add_sae_argument(p, required=False)
    add_clamp_argument(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def predict(session, args) -> dict:
    """The JSON-ready result for `args` on a session that already holds the prompt."""
    from transformer_viewer.viewer.cli.common import intervention_from_args
    from transformer_viewer.viewer.cli.sae_options import clamps_from_args

    intervention = intervention_from_args(args, session.config,
                                          clamps=clamps_from_args(args, len(session.tokens.ids)))
    mask = intervention.mask
    nxt = session.run(intervention, position=args.position, top_k=args.top_k).next
    tok = session.tokenizer

    def text(i) -> str:  # what the token stands for (a SentencePiece piece keeps its space)
        return tok.token_bytes(int(i)).decode("utf-8", errors="replace")

    return {
        "tokens": [{"id": int(i), "text": text(i), "special": bool(s)}
                   for i, s in zip(session.tokens.ids, session.tokens.special, strict=True)],
        "position": int(nxt.position),
        # What was run, so a saved result says which heads it lacks and how they were removed.
        "mask": [f"{layer}.{head}" for layer, head in zip(*mask.nonzero(), strict=True)],
        "ablation": args.ablation if mask.any() else None,
        "clamps": [c.describe() for c in intervention.clamps],
        "top": [{"id": int(i), "token": text(i), "prob": float(p), "logit": float(lg)}
                for i, p, lg in zip(nxt.top_ids, nxt.top_probs, nxt.top_logits, strict=True)],
    }


def run(args) -> int:
    from transformer_viewer.viewer.cli.common import (
        check_mask_syntax,
        load_from_args,
        note_truncated,
        refuse_non_finite,
    )

    if args.top_k < 1:
        raise ModelError(f"--top-k must be at least 1, got {args.top_k}")
    check_mask_syntax(args.mask)
    from transformer_viewer.viewer.cli.sae_options import attach_saes, check_sae_syntax

    check_sae_syntax(args)
    from transformer_viewer.model.capture.session import Session  # torch: only once the arguments are good

    session = Session(load_from_args(args))
    session.set_prompt(args.prompt)
    note_truncated(session.dropped, len(session.tokens.ids), session.config.block_size)
    attach_saes(args, session)
    result = predict(session, args)
    refuse_non_finite("next-token probabilities", [t["prob"] for t in result["top"]],
                      [t["logit"] for t in result["top"]])
    if args.json:
        from transformer_viewer.viewer.cli.common import json_safe

        # Strict JSON: a model whose finite weights overflow gives NaN logits, which JSON cannot hold.
        print(json.dumps(json_safe(result), ensure_ascii=False, allow_nan=False))
    else:
        print(format_text(result, session, args))
    return 0


def format_text(result: dict, session, args) -> str:
    labels = session.tokens.labels
    p = result["position"]
    lines = [f"tokens ({len(labels)}):"]
    lines.append("  " + " ".join(f"{i}:{lab}" for i, lab in enumerate(labels)))
    if args.mask:
        lines.append(f"ablated heads ({args.ablation}): {' '.join(args.mask)}")
    if result["clamps"]:
        lines.append(f"clamped features: {' '.join(result['clamps'])}")
    lines.append(f"next token after position {p} ({labels[p]}):")
    tok = session.tokenizer
    width = max(len(tok.label(t["id"])) for t in result["top"])
    for rank, t in enumerate(result["top"], 1):
        lines.append(f"  {rank:>3}. {tok.label(t['id']):<{width}}  p={t['prob']:.4f}  logit={t['logit']:8.3f}  id={t['id']}")
    return "\n".join(lines)
