"""`transformer-viewer`: with no subcommand it opens the window; subcommands work headless.

Each subcommand lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`.
Errors the user can act on print one line to stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from transformer_viewer.viewer.cli.common import ArgumentParser

# name -> (module, one-line help). Modules are imported only when their command runs, so
# `predict` never pays for Qt and the window never waits for argparse of every command.
SUBCOMMANDS = {
    "info": ("transformer_viewer.viewer.cli.info", "describe a checkpoint: format, config, parameters"),
    "predict": ("transformer_viewer.viewer.cli.predict", "top-k next tokens for a prompt, with optional head masks"),
    "train": ("transformer_viewer.viewer.cli.train", "train a small model on text files"),
    "heads": ("transformer_viewer.viewer.cli.heads", "score every head: previous-token, induction, sink, ..."),
    "scan": ("transformer_viewer.viewer.cli.scan", "head-importance scan: ablate each head, measure the effect"),
    "export": ("transformer_viewer.viewer.cli.export", "render a view to PNG/SVG/PDF/NPY/CSV without a window"),
    "attribute": ("transformer_viewer.viewer.cli.attribute", "every component's direct effect on a logit (difference)"),
    "routes": ("transformer_viewer.viewer.cli.routes", "information-flow routes from one position to the tokens"),
    "rollout": ("transformer_viewer.viewer.cli.rollout", "attention rollout through a range of layers"),
    "patch": ("transformer_viewer.viewer.cli.patch", "activation patching between a clean and a corrupted prompt"),
    "features": ("transformer_viewer.viewer.cli.features", "each token's most active features of sparse autoencoders"),
    "train-sae": ("transformer_viewer.viewer.cli.train_sae", "train a sparse autoencoder on a hook's activations"),
}
GUI_MODULE = "transformer_viewer.viewer.cli.gui"
# Options holding text for the tokenizer (not paths: a file name that is not UTF-8 is still its name).
TEXT_OPTIONS = ("prompt", "target", "distractor", "clean", "corrupted")
_UNDECODABLE = re.compile("[\ud800-\udfff]")  # how Python passes argv bytes that are not UTF-8


def build_parser(name: str) -> argparse.ArgumentParser:
    module_name, help_text = SUBCOMMANDS[name]
    parser = ArgumentParser(prog=f"transformer-viewer {name}", description=help_text)
    importlib.import_module(module_name).add_arguments(parser)
    return parser


def gui_parser() -> argparse.ArgumentParser:
    commands = "\n".join(f"  {n:<9}{h}" for n, (_, h) in SUBCOMMANDS.items())
    parser = ArgumentParser(
        prog="transformer-viewer",
        description="See inside GPT-style transformers. With no subcommand, opens the window.",
        epilog=f"subcommands (transformer-viewer COMMAND --help):\n{commands}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    importlib.import_module(GUI_MODULE).add_arguments(parser)
    return parser


def mistyped_command(first: str) -> str | None:
    """The subcommand `first` was probably meant to be, when it is no checkpoint: not a file, not
    a folder, not a model in the local Hugging Face cache, and close to a subcommand's name."""
    import difflib
    import os

    if first.startswith("-") or os.path.exists(first):
        return None
    close = difflib.get_close_matches(first.lower(), SUBCOMMANDS, n=1)
    if not close:
        return None
    from transformer_viewer.model.checkpoints.formats import (
        hf_cache,  # only for a word that looks like a typo
    )

    if hf_cache.looks_like_name(first) and hf_cache.find_snapshot(first) is not None:
        return None
    return close[0]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _print_paths_as_named()
    if argv and argv[0] not in SUBCOMMANDS and (meant := mistyped_command(argv[0])) is not None:
        print(f"error: {argv[0]!r} is neither a command nor a checkpoint (no such file, folder or cached model); "
              f"did you mean {meant}?", file=sys.stderr)
        return 2
    if argv and argv[0] in SUBCOMMANDS:
        name, rest = argv[0], argv[1:]
        args = build_parser(name).parse_args(rest)
        module = importlib.import_module(SUBCOMMANDS[name][0])
    else:
        args = gui_parser().parse_args(argv)
        module = importlib.import_module(GUI_MODULE)
    decode_text_options(args)
    return run_guarded(module.run, args)


def _print_paths_as_named() -> None:
    """A Linux path is bytes; one that is not UTF-8 reaches Python with lone surrogates standing
    for its undecodable bytes (PEP 383). A strict stdout would fail to print it (`info` prints
    the path): it is written back as the bytes it was named with, as `ls` does. stderr already
    escapes them."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None and getattr(sys.stdout, "errors", None) == "strict":
        reconfigure(errors="surrogateescape")


def decode_text_options(args) -> None:
    """Read the bytes of a text option that are not UTF-8 as U+FFFD, with one note saying so, the
    same for every tokenizer (the window's and the library's alike)."""
    for name in TEXT_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str) and _UNDECODABLE.search(value):
            from transformer_viewer.model.tokenizers.tokenizer import replace_undecodable, undecodable_count

            n = undecodable_count(value)
            setattr(args, name, replace_undecodable(value))
            print(f"note: --{name} holds {n} byte{'s' if n != 1 else ''} that {'are' if n != 1 else 'is'} not UTF-8; "
                  "each is read as U+FFFD, the replacement character", file=sys.stderr)


def run_guarded(fn, args) -> int:
    from transformer_viewer.model.errors import ModelError

    try:
        return int(fn(args) or 0)
    except ModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
