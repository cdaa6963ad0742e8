"""The `prompt` part: the text the session ran, and the `intervention` part: the heads it masked
and how (the value `Intervention.make` checks against the model once it is loaded)."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_viewer.model.capture.interventions import ABLATIONS
from transformer_viewer.model.sessions.checkpoint_part import MAX_COUNT
from transformer_viewer.model.sessions.fields import Fields, bad_field, int_pair
from transformer_viewer.model.sessions.parts import Part

MAX_PROMPT_CHARS = 1 << 20  # the tokenizer bounds what a text may cost; this bounds the file
MAX_MASKED = 1 << 16


@dataclass(frozen=True)
class PromptRecord:
    text: str


@dataclass(frozen=True)
class InterventionRecord:
    n_layer: int
    n_head: int
    masked: tuple[tuple[int, int], ...]  # (layer, head) of each masked head, sorted
    ablation: str


def _prompt_from_json(f: Fields) -> PromptRecord:
    return PromptRecord(f.text("text", "", max_chars=MAX_PROMPT_CHARS))


def _intervention_from_json(f: Fields) -> InterventionRecord:
    n_layer = f.integer("n_layer", 1, MAX_COUNT, required=True)
    n_head = f.integer("n_head", 1, MAX_COUNT, required=True)
    masked = []
    for i, item in enumerate(f.items("masked", MAX_MASKED)):
        layer, head = int_pair(item, f"{f.where}.masked[{i}]", 0, MAX_COUNT)
        if layer >= n_layer or head >= n_head:
            raise bad_field(f"{f.where}.masked[{i}]", f"names head {layer}.{head} of a {n_layer} x {n_head} model")
        masked.append((layer, head))
    return InterventionRecord(n_layer, n_head, tuple(sorted(set(masked))),
                              f.choice("ablation", ABLATIONS, ABLATIONS[0]))


PROMPT = Part("prompt", 1, lambda r: {"text": r.text}, _prompt_from_json)
INTERVENTION = Part("intervention", 1,
                    lambda r: {"n_layer": r.n_layer, "n_head": r.n_head, "masked": [list(p) for p in r.masked],
                               "ablation": r.ablation},
                    _intervention_from_json)
