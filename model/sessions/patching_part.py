"""The `patching` part: the activation-patching experiment the window set up (the corrupted
prompt, the metric and its tokens, the direction, what is patched, the receiver of a path patch,
the prompt pairs of a pairs file), as the patching view's setup holds it."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_viewer.model.analysis.patching.grid import DIRECTIONS, WHATS
from transformer_viewer.model.analysis.patching.metric import METRICS
from transformer_viewer.model.sessions.checkpoint_part import MAX_COUNT
from transformer_viewer.model.sessions.fields import Fields, bad_field
from transformer_viewer.model.sessions.parts import Part
from transformer_viewer.model.sessions.prompt_part import MAX_PROMPT_CHARS

RECEIVER_INPUTS = ("q", "k", "v")  # which input of the receiver head a path patch feeds
MAX_PAIRS = 4096
MAX_TOKEN_ID = 1 << 24


@dataclass(frozen=True)
class PatchingRecord:
    comparing: bool = False
    corrupted: str = ""
    metric: str = "logit-diff"
    tokens: tuple[int, ...] = ()
    position: int | None = None  # None: the last position
    direction: str = "denoise"
    what: str = "heads"
    layer: int = 0
    receiver: tuple[int, int] = (0, 0)
    input: str = "v"
    normalised: bool = True
    pairs: tuple[tuple[str, str], ...] = ()
    pairs_name: str = ""


def _to_json(r: PatchingRecord) -> dict:
    d = dict(r.__dict__)
    d.update(tokens=list(r.tokens), receiver=list(r.receiver), pairs=[list(p) for p in r.pairs])
    return d


def _from_json(f: Fields) -> PatchingRecord:
    tokens = f.items("tokens", 2)
    for i, t in enumerate(tokens):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < MAX_TOKEN_ID:
            raise bad_field(f"{f.where}.tokens[{i}]", "is not a token id")
    pairs = []
    for i, pair in enumerate(f.items("pairs", MAX_PAIRS)):
        if (not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(t, str) for t in pair)
                or any(len(t) > MAX_PROMPT_CHARS for t in pair)):
            raise bad_field(f"{f.where}.pairs[{i}]", "is not a pair of prompts")
        pairs.append((pair[0], pair[1]))
    receiver = f.pair("receiver", 0, MAX_COUNT, (0, 0))
    return PatchingRecord(
        comparing=f.flag("comparing"), corrupted=f.text("corrupted", "", max_chars=MAX_PROMPT_CHARS),
        metric=f.choice("metric", METRICS, "logit-diff"), tokens=tuple(tokens),
        position=f.integer("position", 0, 1 << 24), direction=f.choice("direction", DIRECTIONS, "denoise"),
        what=f.choice("what", WHATS, "heads"), layer=f.integer("layer", 0, MAX_COUNT, 0),
        receiver=receiver,
        input=f.choice("input", RECEIVER_INPUTS, "v"), normalised=f.flag("normalised", True), pairs=tuple(pairs),
        pairs_name=f.text("pairs_name", ""))


PART = Part("patching", 1, _to_json, _from_json)
