"""The options of one activation-patching experiment on the command line, shared by
`transformer-viewer patch` and `transformer-viewer export --view patching`: the metric and its
tokens, the position it is read at, the direction, what is patched, the layer of heads-by-pos,
path patching's receiver and its input, and `--estimate`.

Their defaults are None on the parser so that a saved session's patching part (`--session`) or
a figure manifest's (`--from-manifest`) can fill what the user left out (`fill_from_record`);
`resolve_defaults` then gives the rest their defaults. `check_experiment` says every mistake
that needs no model; `metric_for` builds the metric once both prompts are tokenized, its default
tokens read from the two runs. `patching_record` is the manifest's `patching` part of an
experiment, the same record a saved session holds.
"""

from __future__ import annotations

import argparse

from transformer_viewer.model.errors import ModelError

INPUTS = ("q", "k", "v")
DEFAULT_WHAT = "resid"


def add_experiment_arguments(p, layer: bool = True) -> None:
    """The experiment's options; `layer`: add `--layer` (a command that has its own `--layer`
    shares it: there it is the layer of --what heads-by-pos for the patching view)."""
    from transformer_viewer.model.analysis.patching.grid import DIRECTIONS, WHAT_HELP
    from transformer_viewer.model.analysis.patching.metric import METRICS
    from transformer_viewer.viewer.cli.token_pair import add_token_pair_argument

    p.add_argument("--metric", default=None, choices=METRICS,
                   help="what each run is measured by: logit-diff (A - B), logprob (log p(A)) or kl (from the clean "
                        "run's distribution) (default: logit-diff)")
    add_token_pair_argument(p, "the metric's tokens (default: the clean run's top prediction, and for logit-diff "
                               "the corrupted run's top prediction as B)")
    p.add_argument("--position", type=int, default=None,
                   help="the position whose prediction is measured, 0-based; negative counts from the end (default: last)")
    p.add_argument("--direction", default=None, choices=DIRECTIONS,
                   help="denoise: clean values into the corrupted run; noise: corrupted into clean (default: denoise)")
    p.add_argument("--what", default=None, choices=tuple(WHAT_HELP),
                   help="what is patched: " + "; ".join(f"{k}: {v}" for k, v in WHAT_HELP.items())
                        + f" (default: {DEFAULT_WHAT})")
    if layer:
        p.add_argument("--layer", type=int, default=None, help="the layer whose heads heads-by-pos patches by position")
    p.add_argument("--receiver", default=None, metavar="L.H", help="path patching's receiver head (with --what path)")
    p.add_argument("--input", default=None, choices=INPUTS, help="the receiver's input path patching writes into")
    p.add_argument("--estimate", action="store_true",
                   help="attribution patching: a first-order estimate of every cell from one forward and backward")


EXPERIMENT_OPTIONS = ("metric", "tokens", "position", "direction", "what", "receiver", "input")


def given_experiment_options(args) -> list[str]:
    """The experiment's options given (other than --layer, which other views share), as typed."""
    given = [f"--{name}" for name in EXPERIMENT_OPTIONS if getattr(args, name, None) is not None]
    return given + (["--estimate"] if getattr(args, "estimate", False) else [])


def fill_from_record(args, record, override: bool = False) -> None:
    """The experiment's options the user left out (all of them with `override`: a manifest's
    experiment is the one it regenerates), from a PatchingRecord."""
    values = {"metric": record.metric, "tokens": [str(t) for t in record.tokens] or None,
              "position": record.position, "direction": record.direction, "what": record.what,
              "receiver": f"{record.receiver[0]}.{record.receiver[1]}" if record.what == "path" else None,
              "input": record.input if record.what == "path" else None,
              "layer": record.layer if record.what == "heads-by-pos" else None}
    for name, value in values.items():
        if override or getattr(args, name, None) is None:
            setattr(args, name, value)
    if getattr(args, "corrupted", None) is None and record.corrupted:
        args.corrupted = record.corrupted
    args.normalised = record.normalised


def resolve_defaults(args) -> None:
    """The defaults of the options neither the user nor a session or manifest gave."""
    from transformer_viewer.model.analysis.patching.grid import DIRECTIONS
    from transformer_viewer.model.analysis.patching.metric import METRICS

    args.metric = args.metric or METRICS[0]
    args.direction = args.direction or DIRECTIONS[0]
    args.what = args.what or DEFAULT_WHAT


def check_experiment(args, own_layer: bool = True) -> None:
    """Say any mistake in the experiment's options before a model loads (defaults resolved);
    `own_layer`: --layer is the experiment's alone (the export command's also selects a layer,
    so there it is only required for heads-by-pos, not refused for other kinds)."""
    from transformer_viewer.model.capture.prompts import parse_layer_head

    resolve_defaults(args)
    if args.what == "path":
        if args.receiver is None or args.input is None:
            raise ModelError("--what path needs the receiver head and its input: --receiver L.H --input q|k|v")
        if parse_layer_head(args.receiver) is None:
            raise ModelError(f"--receiver {args.receiver!r}: write the receiver head as LAYER.HEAD, e.g. 9.6")
    elif args.receiver is not None or args.input is not None:
        raise ModelError("--receiver and --input choose path patching's receiver; add --what path")
    if args.what == "heads-by-pos" and args.layer is None:
        raise ModelError("--what heads-by-pos patches one layer's heads by position: add --layer L")
    if own_layer and args.layer is not None and args.what != "heads-by-pos":
        raise ModelError(f"--layer chooses the layer of --what heads-by-pos; --what {args.what} covers every layer")
    if args.tokens and args.metric == "kl":
        raise ModelError("the kl metric compares whole distributions and takes no --tokens")
    if args.estimate:
        from transformer_viewer.viewer.worker.patching import ESTIMATED

        if args.what not in ESTIMATED:
            raise ModelError(f"--estimate covers --what {', '.join(ESTIMATED)}; "
                             f"--what {args.what} is patched exactly only: leave out --estimate")


def check_exact_size(what: str, n_tokens: int, estimate: bool) -> None:
    """Refuse an exact grid by position of a prompt long enough to take minutes."""
    from transformer_viewer.model.analysis.patching.exact import BY_POSITION, EXACT_GRID_MAX_TOKENS

    if not estimate and what in BY_POSITION and n_tokens > EXACT_GRID_MAX_TOKENS:
        raise ModelError(f"the exact {what} grid of {n_tokens:,} tokens is a patched run per position and layer; "
                         f"shorten the prompts to {EXACT_GRID_MAX_TOKENS} tokens or fewer, or add --estimate")


def metric_for(args, session, intervention=None):
    """The metric the arguments ask for, its default tokens read from this session's two runs."""
    from transformer_viewer.model.analysis.patching.metric import PatchMetric
    from transformer_viewer.viewer.cli.token_pair import parse_token_pair

    tokens = parse_token_pair(args.tokens, session.tokenizer, session.n_vocab)
    need = {"logit-diff": 2, "logprob": 1, "kl": 0}[args.metric]
    if tokens is not None and len(tokens) != need:
        raise ModelError(f"--metric {args.metric} takes {need} token{'s' if need != 1 else ''} in --tokens, "
                         f"got {len(tokens)}")
    if tokens is None and need:
        tokens = default_tokens(session, args.position, need, intervention)
    return PatchMetric.make(args.metric, tokens or (), args.position, session.n_vocab)


def default_tokens(session, position, need: int, intervention=None) -> tuple[int, ...]:
    """The clean run's top prediction at the position, and for a pair the corrupted run's."""
    from transformer_viewer.model.analysis.patching.exact import metric_top_tokens

    clean_top, corrupted_top = metric_top_tokens(session, position, intervention)
    if need == 1:
        return (clean_top,)
    if clean_top == corrupted_top:
        label = session.tokenizer.label(clean_top)
        raise ModelError(f"the clean and the corrupted run both predict {label!r} first, so their logit "
                         "difference says nothing; give the two tokens to compare: --tokens A B")
    return clean_top, corrupted_top


def absolute_position(position: int | None, n_tokens: int) -> int | None:
    """`--position` counted from the start (a negative one counts from the end); None: the last."""
    if position is None:
        return None
    absolute = position + n_tokens if position < 0 else position
    if not 0 <= absolute < n_tokens:
        raise ModelError(f"--position {position} is outside the clean prompt's {n_tokens} tokens "
                         f"(0..{n_tokens - 1}, or -1..-{n_tokens} from the end)")
    return absolute


def patching_record(args, corrupted: str, metric, n_tokens: int):
    """The manifest's `patching` part (the saved session's PatchingRecord) of this experiment."""
    from transformer_viewer.model.capture.prompts import parse_layer_head
    from transformer_viewer.model.sessions.patching_part import PatchingRecord

    receiver = parse_layer_head(args.receiver) if args.what == "path" else None
    return PatchingRecord(comparing=True, corrupted=corrupted, metric=args.metric, tokens=tuple(metric.tokens),
                          position=absolute_position(args.position, n_tokens), direction=args.direction,
                          what=args.what, layer=args.layer if args.what == "heads-by-pos" else 0,
                          receiver=tuple(receiver) if receiver is not None else (0, 0),
                          input=args.input if args.what == "path" else "v",
                          normalised=getattr(args, "normalised", True))


def add_manifest_arguments(parser: argparse.ArgumentParser) -> None:
    """`patch --out`'s manifest options, as the export command spells them."""
    m = parser.add_argument_group("reproducible figures")
    m.add_argument("--write-manifest", action="store_true",
                   help="with --out: also write OUT.manifest.json, from which `transformer-viewer export "
                        "--from-manifest` regenerates the file")
    m.add_argument("--manifest-private", action="store_true",
                   help="leave both prompts and local paths out of the manifest (regenerating then needs --prompt, "
                        "--corrupted, the checkpoint and each --sae)")
    m.add_argument("--embed-manifest", action="store_true",
                   help="embed the manifest in the .svg's or .pdf's own metadata")
