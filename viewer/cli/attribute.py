"""`transformer-viewer attribute [CHECKPOINT] --prompt TEXT [--position P] [--tokens A [B]]
[--mask L.H ...] [--ablation zero|mean] [--sae PATH[@HOOK] ... --clamp [SAE:]FEATURE=VALUE|xSCALE[@POSITION] ...]
[--top N] [--json | --out FILE.json|.csv]`: every component's direct effect on one logit (or
logit difference) at one position, in the run with the heads ablated and the SAE features clamped.

`--json` prints {"tokens": [ids], "position": P, "logit": the model's logit (difference) before
any final soft-cap, "clamps": ["SAE:FEATURE=VALUE"...], "terms": [{"component", "layer", "head",
"value"}...]}, whose values sum to "logit" (components: embedding, position, head, attn_bias,
mlp, clamp, norm_bias, unembed_bias; a "clamp" term for each layer that applies a clamp: what
its clamps added, read straight through the final norm).
"""

from __future__ import annotations

import argparse
import sys

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import (
    add_ablation_argument,
    add_checkpoint_arguments,
    add_session_argument,
)
from transformer_viewer.viewer.cli.sae_options import add_clamp_argument, add_sae_argument
from transformer_viewer.viewer.cli.token_pair import add_token_pair_argument, parse_token_pair


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    p.add_argument("--prompt", default=None, help="the text to run (or the one a --session ran)")
    add_session_argument(p)
    p.add_argument("--position", type=int, default=None,
                   help="position whose prediction is split, 0-based; negative counts from the end (default: last)")
    add_token_pair_argument(p, "the logit split")
    p.add_argument("--mask", nargs="+", action="extend", default=[], metavar="L.H",
                   help="ablate head H of layer L in the run that is split, e.g. 3.1 or 0.*")
    add_ablation_argument(p)
    add_sae_argument(p, required=False)
    add_clamp_argument(p)
    p.add_argument("--top", type=int, default=15, help="how many of the largest terms the text lists (default: 15)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the terms as one JSON object")
    out.add_argument("--out", default=None, help="write the terms to FILE.json or FILE.csv")


def result(a, session, clamps: tuple = ()) -> dict:
    tok = session.tokenizer
    return {"model": session.loaded.name, "source": session.loaded.source, "kernel_path": session.kernel_path,
            "prompt": session.tokens.text,
            "tokens": list(a.tokens), "token_text": [tok.token_bytes(t).decode("utf-8", "replace") for t in a.tokens],
            "position": a.position, "logit": a.logit, "logit_cap": a.logit_cap or None,
            "mask": [f"{layer}.{head}" for layer, head in zip(*a.mask.nonzero(), strict=True)],
            "ablation": a.ablation if a.mask.any() else None, "clamps": [c.describe() for c in clamps],
            "terms": a.terms()}


def run(args) -> int:
    from transformer_viewer.viewer.cli.common import (
        check_mask_syntax,
        intervention_from_args,
        refuse_non_finite,
        session_arguments,
        session_for_prompt,
        write_json_or_print,
    )

    session_arguments(args)  # --session: the checkpoint, prompt, mask, SAEs and clamps it saved
    if args.top < 1:
        raise ModelError(f"--top must be at least 1, got {args.top}")
    if args.out is not None and not args.out.lower().endswith((".json", ".csv")):
        raise ModelError(f"--out {args.out}: the terms are written as .json or .csv")
    check_mask_syntax(args.mask)
    from transformer_viewer.viewer.cli.sae_options import attach_saes, check_sae_syntax, clamps_from_args

    check_sae_syntax(args)
    session = session_for_prompt(args)
    attach_saes(args, session)
    intervention = intervention_from_args(args, session.config, clamps=clamps_from_args(args, len(session.tokens.ids)))
    from transformer_viewer.model.analysis.logit_attribution import logit_attribution

    tokens = parse_token_pair(args.tokens, session.tokenizer, session.n_vocab)
    a = logit_attribution(session, position=args.position, tokens=tokens,
                          intervention=intervention)
    refuse_non_finite("direct effects", [a.logit], [t["value"] for t in a.terms()])
    obj = result(a, session, intervention.clamps)
    if args.json:
        write_json_or_print(obj, None)
    elif args.out is not None and args.out.lower().endswith(".json"):
        write_json_or_print(obj, args.out)
    elif args.out is not None:
        from transformer_viewer.viewer.export import write_file

        lines = ["component,layer,head,value"]
        lines += [f"{t['component']},{'' if t['layer'] is None else t['layer']},"
                  f"{'' if t['head'] is None else t['head']},{t['value']:.9g}" for t in a.terms()]
        data = ("\n".join(lines) + "\n").encode("utf-8")
        print(f"wrote {write_file(args.out, data)}", file=sys.stderr)
    else:
        print(format_text(a, session, args.top, intervention.clamps))
    return 0


def _name(t: dict) -> str:
    if t["component"] == "head":
        return f"head {t['layer']}.{t['head']}"
    if t["component"] == "clamp":
        return f"clamps L{t['layer']}"
    if t["layer"] is not None:
        return f"{t['component'].replace('_', ' ')} {t['layer']}"
    return t["component"].replace("_", " ")


def format_text(a, session, top: int, clamps: tuple = ()) -> str:
    labels = session.tokens.labels
    tok = session.tokenizer
    what = tok.label(a.tokens[0]) + (f" - {tok.label(a.tokens[1])}" if len(a.tokens) == 2 else "")
    lines = [f"direct effects on logit({what}) at position {a.position} ({labels[a.position]}): {a.logit:.4f}"
             + (f" (before the soft-cap of {a.logit_cap:g})" if a.logit_cap else ""),
             "  each writer read through the final norm with its scale frozen at that position",
             *([f"  clamped features: {' '.join(c.describe() for c in clamps)}"] if clamps else []),
             f"  the {len(a.terms())} terms sum to {a.total():.4f}; the largest {min(top, len(a.terms()))}:"]
    for t in a.top(top):
        lines.append(f"  {_name(t):<20} {t['value']:+10.4f}  ({100 * t['share']:.1f}%)")
    return "\n".join(lines)
