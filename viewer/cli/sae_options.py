"""`--sae PATH[@HOOK]` (repeatable) and `--clamp [SAE:]FEATURE=VALUE|xSCALE[@POSITION]`, shared
by the commands that open SAEs: their syntax checked before the model loads, the SAEs attached
to the session in the order given (SAE i is the i-th `--sae`), the clamps made into the
Intervention's FeatureClamps against the prompt's tokens."""

from __future__ import annotations

import argparse
import math
import re
import sys

from transformer_viewer.model.errors import ModelError

_CLAMP = re.compile(r"^(?:(?P<sae>[0-9]{1,4}):)?(?P<feature>[0-9]{1,10})(?P<op>[=x])(?P<value>[-+0-9.eE]{1,32})"
                    r"(?:@(?P<position>-?[0-9]{1,9}))?$")
CLAMP_HELP = ("clamp a feature of SAE number SAE (the order of --sae, default 0): =VALUE sets its activation (=0 "
              "zeroes it), xSCALE multiplies it; @POSITION at one token (negative counts from the end), else at "
              "every token; repeatable")


def add_sae_argument(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--sae", action="append", default=[], required=required, metavar="PATH[@HOOK]",
                   help="an SAE: an SAELens folder, a Gemma Scope params.npz (with @blocks.L.hook_resid_post), or "
                        "REPO_ID/SUBFOLDER in the local Hugging Face cache; repeatable")


def add_clamp_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clamp", action="append", default=[], metavar="[SAE:]FEATURE=VALUE|xSCALE[@POSITION]",
                   help=CLAMP_HELP)


def parse_clamp(spec: str) -> tuple[int, int, str, float, int | None]:
    """(sae, feature, kind, value, position or None) of one --clamp; bad syntax is one line."""
    m = _CLAMP.match(spec.strip()) if spec.isascii() else None
    value = _number(m.group("value")) if m else None
    if m is None or value is None:
        raise ModelError(f"--clamp {spec!r}: write [SAE:]FEATURE=VALUE or [SAE:]FEATURE xSCALE, optionally @POSITION "
                         "(e.g. 1234=0, 0:77x2.5@-1)")
    position = m.group("position")
    return (int(m.group("sae") or 0), int(m.group("feature")), "set" if m.group("op") == "=" else "scale", value,
            None if position is None else int(position))


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def check_sae_syntax(args) -> None:
    """Refuse a bad --clamp, or a clamp naming an SAE that is not given, before the model loads."""
    for spec in getattr(args, "clamp", []) or []:
        sae = parse_clamp(spec)[0]
        if sae >= len(args.sae):
            given = f"{len(args.sae)} --sae" if args.sae else "no --sae"
            raise ModelError(f"--clamp {spec}: names SAE {sae}, but {given} given; open it with --sae (SAE i is the "
                             "i-th --sae, from 0)")


def attach_saes(args, session) -> list:
    """Load each --sae for the session's model (holding the prompt) and attach it (index = its
    order); the notes each SAE brings, and a prompt past its training context, go to stderr."""
    from transformer_viewer.model.sae.loading import load_sae, past_context

    loaded = []
    for spec in args.sae:
        sae = load_sae(spec, session.config, model_name=session.loaded.name)
        index = session.attach_sae(sae)
        assert index == len(loaded)  # a fresh session numbers its SAEs from 0
        context = past_context(sae.config, len(session.tokens.ids))
        for note in (*sae.warnings, *([context] if context else [])):
            print(f"note: SAE {index} ({sae.name}): {note}", file=sys.stderr)
        loaded.append(sae)
    return loaded


def clamps_from_args(args, n_tokens: int) -> tuple:
    """The --clamp options as FeatureClamps for a prompt of `n_tokens`."""
    from transformer_viewer.model.capture.interventions import FeatureClamp

    clamps = []
    for spec in getattr(args, "clamp", []) or []:
        sae, feature, kind, value, position = parse_clamp(spec)
        if position is not None:
            p = position + n_tokens if position < 0 else position
            if not 0 <= p < n_tokens:
                raise ModelError(f"--clamp {spec}: position {position} is outside the prompt's {n_tokens} tokens")
            position = p
        clamps.append(FeatureClamp(sae, feature, kind, value, position))
    return tuple(clamps)
