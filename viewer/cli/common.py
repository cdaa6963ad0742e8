"""Arguments and helpers that several subcommands share."""

from __future__ import annotations

import argparse
import math
import sys
import time

from transformer_viewer.model.errors import ModelError


def ascii_int(text: str) -> int:
    """An integer written in ASCII digits. `int` also reads other scripts' digits (`'٣'` is 3) and
    `str.isdigit` calls `'²'` a digit that `int` refuses: a number the user types is ASCII."""
    if not text.isascii():
        raise ValueError(f"invalid literal for int() with base 10: {text!r}")
    return int(text)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, plus: a command with `add_checkpoint_arguments` gets args.checkpoint from either
    spelling, and two different checkpoints are a usage error like any other; every `type=int`
    option reads ASCII digits only (`ascii_int`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("type", int, ascii_int)

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        if hasattr(ns, "checkpoint_positional"):
            try:
                checkpoint_from_args(ns)
            except ModelError as e:
                self.error(str(e))
        return ns, extras


CHECKPOINT_HELP = "checkpoint file, Hugging Face folder or cached model name (default: the bundled model)"


def add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """CHECKPOINT as a positional argument or as --checkpoint, in every command alike;
    `checkpoint_from_args` reconciles the two."""
    parser.add_argument("checkpoint_positional", nargs="?", default=None, metavar="CHECKPOINT", help=CHECKPOINT_HELP)
    parser.add_argument("--checkpoint", default=None, metavar="CHECKPOINT", help="the same, given by name")
    parser.add_argument("--n-head", type=int, default=None, help="head count, for tutorial-style state dicts that cannot say")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run (default: auto)")


def checkpoint_from_args(args) -> str | None:
    """The checkpoint named positionally or by --checkpoint (None: the bundled model). Sets
    args.checkpoint to it, so later code reads one attribute."""
    positional = getattr(args, "checkpoint_positional", None)
    named = getattr(args, "checkpoint", None)
    if positional is not None and named is not None and positional != named:
        raise ModelError(f"two checkpoints given ({positional} and --checkpoint {named}); pass one")
    args.checkpoint = named if named is not None else positional
    args.checkpoint_positional = None
    return args.checkpoint


BAR_AFTER_S = 0.5  # a load shorter than this shows no bar


def load_from_args(args, for_inference: bool = True):
    """The checkpoint the arguments name, on their device; `for_inference`: with the inference
    kernels installed (model/kernels/inference.py), as the commands that run it only read the weights."""
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.device import resolve_device
    from transformer_viewer.model.kernels.inference import install_inference

    device = resolve_device(args.device)
    with TerminalBar("tensor", after_s=BAR_AFTER_S) as bar:  # the tensors read, then checked
        loaded = load_checkpoint(checkpoint_from_args(args), device=device, n_head=getattr(args, "n_head", None),
                                 progress=(lambda done, total, stage: bar.update(done + 1, total, stage))
                                 if bar.enabled else None)
    if for_inference:
        install_inference(loaded.model)
    check_expected_checkpoint(args, loaded)
    return loaded


def refuse_non_finite(what: str, *values) -> None:
    """The check every command that runs the model makes on what it computed before printing or
    writing it: `values` (numbers, numpy arrays, or lists of them) must be finite. Weights that
    are finite but overflow float32 arithmetic (3e38 everywhere) or a config the loader cannot
    tell is degenerate give NaN outputs; printed, they read as a result (p=nan) with exit 0.
    The weights' magnitudes are not checked instead: large but valid weights exist."""
    import numpy as np

    for value in values:
        array = np.asarray(value, dtype=np.float64)
        if array.size and not np.isfinite(array).all():
            raise ModelError(f"the model's {what} are not finite (NaN or infinity): its weights or config overflow "
                             "float32 arithmetic, so there is no result to show; check or re-save the checkpoint")


class TerminalBar:
    """A tqdm bar on stderr for a long command: drawn only on a terminal (in a log file a bar is
    a stray line of carriage returns) and only once the work has taken `after_s`; cleared when
    closed, before any message, so it does not redraw over one."""

    def __init__(self, unit: str, after_s: float = 0.0, enabled: bool = True):
        self.unit, self.after_s = unit, after_s
        self.enabled = enabled and sys.stderr.isatty()
        self._bar = None
        self._t0 = time.perf_counter()

    def update(self, done: int, total: int, description: str | None = None) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            if time.perf_counter() - self._t0 < self.after_s:
                return
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit=self.unit, file=sys.stderr, dynamic_ncols=True, leave=False)
        if description is not None:
            self._bar.set_description(description, refresh=False)
        self._bar.total, self._bar.n = int(total), int(done)
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> TerminalBar:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def note_truncated(dropped: int, kept: int, context: int, file=None) -> None:
    """The one line every command prints when a prompt is longer than the model's context and
    its first `dropped` tokens were cut (the model sees the last `kept`)."""
    if dropped > 0:
        print(f"note: the prompt is longer than the model's context of {context} tokens; "
              f"kept its last {kept} (dropped the first {dropped}), positions count from there",
              file=file if file is not None else sys.stderr)


def parse_head_option(head: str | None, layer: int | None) -> tuple[int | None, int | None]:
    """(layer, head) from `--head H` with `--layer L`, or from `--head L.H` alone (the window's
    syntax); a `--layer` that disagrees with `L.H` is an error."""
    from transformer_viewer.model.capture.prompts import parse_layer_head

    if head is None:
        return layer, None
    both = parse_layer_head(head)
    if both is not None:
        if layer is not None and layer != both[0]:
            raise ModelError(f"--head {head} names layer {both[0]} but --layer is {layer}; give one of them")
        return both
    try:
        return layer, int(head)
    except ValueError:
        raise ModelError(f"--head {head}: give a head as LAYER.HEAD (e.g. 2.2) or a number with --layer, "
                         "counting from 0") from None


def check_mask_syntax(specs: list[str] | None) -> None:
    """Say a malformed --mask before any model loads; ranges are checked once the model is known."""
    for spec in specs or []:
        _split_mask_spec(spec)


def _split_mask_spec(spec: str) -> tuple[int, str]:
    try:
        layer_s, head_s = spec.split(".")
        layer = ascii_int(layer_s)
        if head_s != "*":
            ascii_int(head_s)
    except ValueError:
        raise ModelError(f"bad --mask {spec!r}: write LAYER.HEAD (0-based), e.g. --mask 3.1, or LAYER.* for a whole layer") from None
    return layer, head_s


def parse_mask_spec(specs: list[str] | None, n_layer: int, n_head: int):
    """`--mask 3.1 0.*` -> boolean (n_layer, n_head) array; `L.*` masks a whole layer."""
    import numpy as np

    mask = np.zeros((n_layer, n_head), dtype=bool)
    for spec in specs or []:
        layer, head_s = _split_mask_spec(spec)
        heads = range(n_head) if head_s == "*" else [ascii_int(head_s)]
        if not 0 <= layer < n_layer:
            raise ModelError(f"--mask {spec}: layer {layer} does not exist; the model has layers 0..{n_layer - 1}")
        for h in heads:
            if not 0 <= h < n_head:
                raise ModelError(f"--mask {spec}: head {h} does not exist; the model has heads 0..{n_head - 1}")
            mask[layer, h] = True
    return mask


def add_ablation_argument(parser: argparse.ArgumentParser,
                          help_text: str = "how masked heads are ablated (default: zero)") -> None:
    """`--ablation`, its choices the ablation kinds the model knows."""
    from transformer_viewer.model.capture.interventions import ABLATIONS

    parser.add_argument("--ablation", default=ABLATIONS[0], choices=ABLATIONS, help=help_text)


def intervention_from_args(args, config, what: str = "head mask", clamps: tuple = ()):
    """`--mask` and `--ablation` (and the feature `clamps` made from `--clamp`) as one
    Intervention for a model of `config`'s shape: the one place the command line turns them
    into what a run changes."""
    from transformer_viewer.model.capture.interventions import Intervention

    mask = parse_mask_spec(args.mask, config.n_layer, config.n_head)
    return Intervention.make(config, mask, args.ablation, what, clamps=clamps)


def session_for_prompt(args):
    """A Session on the checkpoint the arguments name holding `args.prompt`, with the note every
    command prints when the prompt is longer than the context."""
    from transformer_viewer.model.capture.session import Session

    session = Session(load_from_args(args))
    session.set_prompt(args.prompt)
    note_truncated(session.dropped, len(session.tokens.ids), session.config.block_size)
    return session


def write_json_or_print(obj: dict, out: str | None) -> None:
    """Strict JSON (NaN refused) to stdout, or atomically to `out`."""
    import json

    text = json.dumps(json_safe(obj), ensure_ascii=False, allow_nan=False)
    if out is None:
        print(text)
        return
    from transformer_viewer.viewer.export import write_file

    path = write_file(out, (text + "\n").encode("utf-8"))
    print(f"wrote {path}", file=sys.stderr)


def json_safe(value, depth: int = 0):
    """`value` as strict JSON allows: NaN and infinities (a loss before the first step, a
    record from a damaged file) become null, anything else unknown its str()."""
    if depth > 32:
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v, depth + 1) for v in value]
    return str(value)


# -- saved sessions -----------------------------------------------------------------------
def add_session_argument(parser: argparse.ArgumentParser) -> None:
    """`--session FILE`: the model, prompt and intervention of a saved `.tvsession` (options
    given beside it win)."""
    parser.add_argument("--session", default=None, metavar="FILE.tvsession",
                        help="take the checkpoint, prompt, head mask, selected position, SAEs and feature clamps "
                             "from a saved session (File > Save session); options given here win")


def session_arguments(args) -> None:
    """The one place a command takes `--session`: fills what the user did not give (checkpoint,
    prompt, mask and ablation, the layer, head and position a command has, the SAEs and clamps)
    from the session, then requires a prompt. `load_from_args` checks the session's fingerprint."""
    path = getattr(args, "session", None)
    if path:
        from transformer_viewer.model.sessions.registry import load

        records, _arrays, notes = load(path)
        for note in notes:
            print(f"note: {path}: {note}", file=sys.stderr)
        fill_from_records(args, records, f"the session {path}")
    if hasattr(args, "prompt") and args.prompt is None:
        raise ModelError("give the text to run with --prompt, or a saved session with --session FILE")


def fill_from_records(args, records: dict, origin: str) -> None:
    """Options the user left out, from session or manifest records."""
    ckpt = records.get("checkpoint")
    if ckpt is not None:
        if getattr(args, "checkpoint_positional", None) is None and getattr(args, "checkpoint", None) is None:
            from transformer_viewer.model.sessions.checkpoint_part import checkpoint_available

            if not checkpoint_available(ckpt.source):
                raise ModelError(f"{ckpt.source}: the checkpoint {origin} was saved with is not on this machine; "
                                 "give it with --checkpoint PATH")
            args.checkpoint = ckpt.source  # None: the bundled model; opened through the same checks as a typed path
            args.expected_checkpoint = (ckpt, origin)
    own_prompt = hasattr(args, "prompt") and args.prompt is None and records.get("prompt") is not None
    if own_prompt:
        args.prompt = records["prompt"].text
    patching = records.get("patching")
    own_clean = False  # `patch`: the clean prompt is the session's, so are its clamps' positions
    if hasattr(args, "clean") and args.clean is None and args.pairs is None and records.get("prompt") is not None:
        args.clean = records["prompt"].text  # `patch`: the session's prompt is the clean one
        own_clean = True
        if args.corrupted is None and patching is not None and patching.corrupted:
            args.corrupted = patching.corrupted
    # `patch` and `export --view patching`: the experiment the session's patching view set up
    experiment = patching is not None and patching.comparing and (
        own_clean or (own_prompt and getattr(args, "view", None) == "patching"))
    if experiment:
        from transformer_viewer.viewer.cli.patch_options import fill_from_record

        fill_from_record(args, patching)
    i = records.get("intervention")
    if i is not None and hasattr(args, "mask") and not args.mask:
        args.mask = [f"{layer}.{head}" for layer, head in i.masked]
        args.ablation = i.ablation
    s = records.get("selection")
    if s is not None:
        # --head is text ("[L.]H"), parsed with --layer by the command
        # export's --position is the patching metric's, never the selected query
        selected_position = not experiment and not hasattr(args, "view")
        positions = (("query", s.query),) + ((("position", s.query),) if selected_position else ()) if own_prompt else ()
        head = (("layer", s.layer), ("head", str(s.head))) if hasattr(args, "head") and not experiment else ()
        for name, value in (*head, *positions):
            if hasattr(args, name) and getattr(args, name) is None:
                setattr(args, name, value)
    v = records.get("views")
    if v is not None and v.attribution_tokens and hasattr(args, "tokens") and args.tokens is None \
            and not experiment and not hasattr(args, "view"):  # export's --tokens: the patching metric's
        args.tokens = [str(t) for t in v.attribution_tokens]  # token ids, as --tokens takes them
    env = records.get("environment")
    if env is not None:
        args.expected_environment = env
    from transformer_viewer.viewer.cli.sae_options import fill_from_session

    fill_from_session(args, records, origin, own_prompt or own_clean)


def check_expected_checkpoint(args, loaded) -> None:
    """After a load for a session or manifest: say (on stderr, one line each) when the weights'
    fingerprint differs from the one saved, or the machine computes differently."""
    expected = getattr(args, "expected_checkpoint", None)
    if expected is None:
        return
    from transformer_viewer.model.sessions.environment_part import current_environment, note_for
    from transformer_viewer.model.sessions.fingerprint import checkpoint_fingerprint

    ckpt, origin = expected
    c = loaded.config
    if (c.n_layer, c.n_head) != (ckpt.n_layer, ckpt.n_head):
        raise ModelError(f"{loaded.source} has {c.n_layer} layers of {c.n_head} heads, but {origin} was saved with "
                         f"{ckpt.n_layer} of {ckpt.n_head}; give its checkpoint with --checkpoint")
    try:
        fp = checkpoint_fingerprint(loaded.source)
    except OSError:
        fp = None
    if fp is not None and ckpt.fingerprint.digest and fp.method == ckpt.fingerprint.method \
            and fp.digest != ckpt.fingerprint.digest:
        print(f"note: {loaded.source} differs from the checkpoint {origin} was saved with (its fingerprint changed); "
              "its numbers may differ", file=sys.stderr)
    env = getattr(args, "expected_environment", None)
    if env is not None and (note := note_for(env, current_environment(loaded.model), c.n_embd, c.n_layer)):
        print(f"note: {note}", file=sys.stderr)
