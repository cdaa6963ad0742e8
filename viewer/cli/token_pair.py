"""`--tokens A [B]`: one token or a token pair, the one spelling across the commands that
measure a logit (attribute, scan, patch, export --view patching)."""

from __future__ import annotations

import argparse

from transformer_viewer.model.errors import ModelError


def add_token_pair_argument(parser: argparse.ArgumentParser, help_subject: str) -> None:
    """`--tokens A [B]`, the one spelling of a token or a token pair across commands."""
    parser.add_argument("--tokens", nargs="+", default=None, metavar="TOKEN",
                        help=f"{help_subject}: one token's logit, or with two the logit difference A - B; each a "
                             "token of the model's vocabulary as text (often with its leading space) or an id "
                             "(default: the top predicted token)")


def parse_token_pair(specs: list[str] | None, tokenizer, n_vocab: int) -> tuple[int, ...] | None:
    """`--tokens A [B]` as token ids; None when not given."""
    from transformer_viewer.model.tokenizers.tokenizer import parse_token

    if not specs:
        return None
    if len(specs) > 2:
        raise ModelError(f"--tokens takes one token or two (A B for the difference A - B), got {len(specs)}")
    return tuple(parse_token(spec, tokenizer, n_vocab, what="--tokens") for spec in specs)
