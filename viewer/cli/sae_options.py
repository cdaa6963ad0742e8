"""`--sae PATH[@HOOK]` (repeatable) and `--clamp [SAE:]FEATURE=VALUE|xSCALE[@POSITION]`, shared
by the commands that open SAEs: their syntax checked before the model loads, the SAEs attached
to the session in the order given (SAE i is the i-th `--sae`), the clamps made into the
Intervention's FeatureClamps against the prompt's tokens. With `--session`, the session's SAEs
and clamps fill in for options not given (`fill_from_session`); `export --from-manifest` takes
the figure's own (`fill_from_manifest`), and `sae_records` says what a manifest records of them."""

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
    expected = getattr(args, "expected_saes", {})
    for spec in args.sae:
        sae = load_sae(spec, session.config, model_name=session.loaded.name)
        index = session.attach_sae(sae)
        assert index == len(loaded)  # a fresh session numbers its SAEs from 0
        if index in expected:
            _check_expected(args, index, sae, *expected[index])
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


# -- from a saved session -----------------------------------------------------------------
def fill_from_session(args, records: dict, origin: str, own_prompt: bool) -> None:
    """The session's SAEs (when no --sae is given) and its clamps (when no --clamp is given
    either), its BOS and top-k for `features`. An SAE the session opened that is not on this
    machine is one line; one whose files changed is a note, and its clamps are dropped."""
    saes, i = records.get("saes"), records.get("intervention")
    if not hasattr(args, "sae"):
        if i is not None and i.clamps:
            print(f"note: {origin} clamps {len(i.clamps)} SAE features; this command runs without SAEs, so without "
                  "them (predict, features, attribute, routes, patch and export apply them)", file=sys.stderr)
        return
    if saes is None or args.sae:
        return  # typed SAEs win, and the session's clamps name the session's SAEs
    from transformer_viewer.model.checkpoints.bundled import bundled_sae_path

    order = {}  # the session's index -> the --sae it becomes
    args.expected_saes = {}
    for s in sorted(saes.saes, key=lambda s: s.index):
        path = bundled_sae_path() if s.spec is None else s.spec
        if not _sae_available(path):
            where = "the bundled SAE" if s.spec is None else s.spec
            raise ModelError(f"{where}: SAE {s.index} of {origin} is not on this machine; give it with --sae "
                             "PATH[@HOOK]")
        order[s.index] = len(args.sae)
        args.expected_saes[len(args.sae)] = (s, origin)
        args.sae.append(f"{path}@{s.hook}")
    if hasattr(args, "bos") and saes.show_bos:
        args.bos = True
    if hasattr(args, "top") and args.top is None:
        args.top = saes.top
    if i is None or not hasattr(args, "clamp") or args.clamp:
        return
    _add_clamps(args, i.clamps, order, origin, own_prompt)


def _add_clamps(args, clamps, order: dict, origin: str, own_prompt: bool) -> None:
    """`clamps` (FeatureClamps naming the saved SAE indices) as --clamp texts naming the --sae
    each SAE became (`order`); `own_prompt`: their positions are of the prompt that runs."""
    args.session_clamps = {}
    for c in clamps:
        if c.sae not in order:
            print(f"note: {origin}: a clamp names SAE {c.sae}, which it does not open; dropped",
                  file=sys.stderr)
            continue
        if c.position is not None and not own_prompt:
            print(f"note: {origin}: the clamp {c.describe()} is at a position of the session's prompt, not of "
                  "--prompt; dropped", file=sys.stderr)
            continue
        text = (f"{order[c.sae]}:{c.feature}{'=' if c.kind == 'set' else 'x'}{float(c.value)!r}"
                + ("" if c.position is None else f"@{c.position}"))
        args.clamp.append(text)
        args.session_clamps.setdefault(order[c.sae], []).append(text)


# -- from a figure manifest -----------------------------------------------------------------
def fill_from_manifest(args, saes, intervention, origin: str, private: bool) -> None:
    """The SAEs and clamps a figure manifest recorded, as --sae and --clamp: each SAE through the
    same load as a typed --sae (its fingerprint compared once loaded: a changed SAE is a note
    and its clamps are dropped), the clamps always (a manifest's clamps are its figure's, at
    positions of its prompt, which a private manifest's user gives again). `--sae` given
    replace the manifest's paths, one for each of its SAEs in order: what a private manifest,
    which leaves its paths out, needs."""
    from transformer_viewer.model.checkpoints.bundled import bundled_sae_path

    records = sorted(saes.saes, key=lambda s: s.index) if saes is not None else []
    typed = list(args.sae)
    if typed and not records:
        raise ModelError(f"--sae: {origin} opens no SAE; regenerate it without --sae")
    if typed and len(typed) != len(records):
        raise ModelError(f"--sae: {origin} opens {len(records)} SAEs, and {len(typed)} --sae are given; give one "
                         "--sae for each, in the order of its SAEs")
    args.sae, args.clamp, args.expected_saes, order = [], [], {}, {}
    for k, s in enumerate(records):
        order[s.index] = k
        args.expected_saes[k] = (s, origin)
        if typed:
            args.sae.append(typed[k])
            continue
        path = bundled_sae_path() if s.spec is None else s.spec
        if not _sae_available(path):
            where = "the bundled SAE" if s.spec is None else s.spec
            if private and s.spec is not None:
                raise ModelError(f"{where}: {origin} is private and leaves the paths of its SAEs out; give each of "
                                 f"its {len(records)} SAEs with --sae PATH[@HOOK], in order (SAE {s.index} reads "
                                 f"{s.hook})")
            raise ModelError(f"{where}: SAE {s.index} of {origin} is not on this machine; give it with --sae "
                             "PATH[@HOOK] (one --sae for each of its SAEs, in order)")
        args.sae.append(f"{path}@{s.hook}")
    if intervention is not None:
        _add_clamps(args, intervention.clamps, order, origin, own_prompt=True)


def sae_records(args, saes) -> tuple:
    """SaeRecords (model/sessions/saes_part.py) of the SAEs `attach_saes` opened from --sae: where
    each was opened from (a path made absolute; None: the bundled SAE), its hook point, widths
    and the fingerprint of its files."""
    import os

    from transformer_viewer.model.checkpoints.bundled import bundled_sae_path
    from transformer_viewer.model.sae.sources import parse_sae_spec
    from transformer_viewer.model.sessions.fingerprint import SAMPLED, Fingerprint, sae_fingerprint
    from transformer_viewer.model.sessions.saes_part import SaeRecord

    records = []
    for index, (spec, sae) in enumerate(zip(args.sae, saes, strict=True)):
        path, _hook = parse_sae_spec(spec)
        where = os.path.abspath(path) if os.path.exists(path) else path
        c = sae.config
        try:
            fingerprint = sae_fingerprint(c.source)
        except (OSError, ModelError):
            fingerprint = Fingerprint(SAMPLED, "", 0)  # its files went since the load: nothing to compare
        bundled = where == os.path.abspath(bundled_sae_path())
        records.append(SaeRecord(index=index, spec=None if bundled else where, hook=c.hook, d_in=int(c.d_in),
                                 d_sae=int(c.d_sae), fingerprint=fingerprint))
    return tuple(records)


def _sae_available(path: str) -> bool:
    """Whether the SAE `path` (a path or REPO_ID/SUBFOLDER) is on this machine; what it holds is
    checked by the load, as for any --sae typed."""
    import os

    from transformer_viewer.model.sae.sources import find_cached

    return os.path.exists(path) or find_cached(path) is not None


def _check_expected(args, index: int, sae, saved, origin: str) -> None:
    """After loading --sae `index` for a session: a note when it is not the SAE the session
    opened (another fingerprint, width or hook point), and the session's clamps of it dropped."""
    from transformer_viewer.model.sessions.fingerprint import sae_fingerprint

    c = sae.config
    try:
        fp = sae_fingerprint(c.source)
    except OSError:
        fp = None
    changed = (c.d_sae, c.hook) != (saved.d_sae, saved.hook) or (
        fp is not None and saved.fingerprint.digest and fp.method == saved.fingerprint.method
        and fp != saved.fingerprint)
    if not changed:
        return
    dropped = getattr(args, "session_clamps", {}).pop(index, [])
    args.clamp = [t for t in args.clamp if t not in dropped]
    gone = f"; its clamps {' '.join(dropped)} were dropped" if dropped else ""
    print(f"note: SAE {index} ({sae.name}) differs from the SAE {origin} was saved with (its fingerprint, width or "
          f"hook point changed){gone}", file=sys.stderr)
