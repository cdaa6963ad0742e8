"""The `prompt` part: the text the session ran, and the `intervention` part: the heads it masked
and how, and the feature clamps (each naming its SAE by the index the `saes` part gives it): the
value `Intervention.make` checks against the model once it is loaded."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_viewer.model.capture.interventions import (
    ABLATIONS,
    CLAMP_KINDS,
    MAX_CLAMP_VALUE,
    MAX_CLAMPS,
    FeatureClamp,
)
from transformer_viewer.model.sessions.checkpoint_part import MAX_COUNT
from transformer_viewer.model.sessions.fields import Fields, bad_field, int_pair
from transformer_viewer.model.sessions.parts import Part

MAX_PROMPT_CHARS = 1 << 20  # the tokenizer bounds what a text may cost; this bounds the file
MAX_MASKED = 1 << 16
MAX_SAES = 256  # SAEs one session holds open (each is megabytes to gigabytes of weights)
MAX_SAE_INDEX = 1 << 16  # indices grow as a model's session opens SAEs, and are never reused
MAX_FEATURES = 1 << 24  # an SAE's width: far past any published one (Gemma Scope's widest is 1M)
MAX_TOKENS = 1 << 24


@dataclass(frozen=True)
class PromptRecord:
    text: str


@dataclass(frozen=True)
class InterventionRecord:
    n_layer: int
    n_head: int
    masked: tuple[tuple[int, int], ...]  # (layer, head) of each masked head, sorted
    ablation: str
    clamps: tuple[FeatureClamp, ...] = ()  # in the order they apply


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
    clamps = []
    for i, item in enumerate(f.items("clamps", MAX_CLAMPS)):
        c = Fields(item, f"{f.where}.clamps[{i}]", f.notes)
        clamps.append(FeatureClamp(sae=c.integer("sae", 0, MAX_SAE_INDEX, required=True),
                                   feature=c.integer("feature", 0, MAX_FEATURES - 1, required=True),
                                   kind=c.choice("kind", CLAMP_KINDS, "set"),
                                   value=c.number("value", -MAX_CLAMP_VALUE, MAX_CLAMP_VALUE, required=True),
                                   position=c.integer("position", 0, MAX_TOKENS - 1)))
        c.finish()
    return InterventionRecord(n_layer, n_head, tuple(sorted(set(masked))),
                              f.choice("ablation", ABLATIONS, ABLATIONS[0]), tuple(clamps))


def _intervention_to_json(r: InterventionRecord) -> dict:
    return {"n_layer": r.n_layer, "n_head": r.n_head, "masked": [list(p) for p in r.masked], "ablation": r.ablation,
            "clamps": [{"sae": c.sae, "feature": c.feature, "kind": c.kind, "value": float(c.value),
                        "position": c.position} for c in r.clamps]}


PROMPT = Part("prompt", 1, lambda r: {"text": r.text}, _prompt_from_json)
INTERVENTION = Part("intervention", 1, _intervention_to_json, _intervention_from_json)
