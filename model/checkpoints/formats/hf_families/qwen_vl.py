"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL open as their text decoder (Qwen2's and Qwen3's), which is
all a text prompt goes through; the vision tower is never read.

Their multimodal rotary (`mrope`, interleaved in Qwen3-VL) gives each section of the rotary
frequencies a position of its own: time, height and width. A text token's three positions are
all its index in the prompt, so every section turns by the same angle as in the plain rotary of
the text model; that is what the decoder computes (the parity tests compare with the multimodal
model's own forward). Qwen3-VL's "deepstack" adds visual features to early layers, and only
when there is an image.

Published Qwen2/2.5-VL configs keep the decoder's values at the top level (with
`rope_scaling: {"type": "mrope"}`); transformers writes them as `text_config`, as Qwen3-VL's
files do.
"""

from __future__ import annotations

from transformer_viewer.model.checkpoints.formats.hf_families.common import Family, Fields
from transformer_viewer.model.checkpoints.formats.hf_families.llama import (
    llama_weights,
    qwen2_fields,
    qwen3_fields,
)
from transformer_viewer.model.checkpoints.formats.schema import describe_value


def text_fields(f: Fields, text_may_tie: bool) -> Fields:
    """The text decoder's config, its multimodal rotary read as the plain one. Whether the head
    is the embedding is the top-level `tie_word_embeddings`, where transformers looks; for
    Qwen2/2.5-VL (`text_may_tie`) a text_config that says true ties it too, as transformers
    reads the files saved before it moved the flag."""
    tie = f.flag("tie_word_embeddings", False)
    nested = f.hf.get("text_config")
    if text_may_tie and not tie and isinstance(nested, dict):
        tie = Fields(nested, f.folder, f.arch).flag("tie_word_embeddings", False)
    text = f.text_decoder(tie, flat=True).hf  # a copy: the published Qwen2/2.5-VL form is one flat object
    for key in ("rope_scaling", "rope_parameters"):
        rope = text.get(key)
        kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
        if kind == "mrope":
            text[key] = {**{k: v for k, v in rope.items() if k != "type"}, "rope_type": "default"}
        elif kind not in (None, "default"):  # a scaled multimodal rotary: none published, none checked
            raise f.refuse(f"rope scaling {describe_value(kind)} on its multimodal rotary")
    return Fields(text, f.folder, f.arch)


def qwen2_vl_fields(f: Fields) -> dict:
    return qwen2_fields(text_fields(f, text_may_tie=True))


def qwen3_vl_fields(f: Fields) -> dict:
    return qwen3_fields(text_fields(f, text_may_tie=False))


# The published layout ("model.layers", "visual."), then the one recent transformers keeps in
# memory and Qwen3-VL publishes ("model.language_model.layers", "model.visual.").
LAYOUT = dict(prefixes=("model.language_model.", "model."), heads=("lm_head.weight",),
              skip=("visual.", "model.visual."))
FAMILIES = {
    "Qwen2VLForConditionalGeneration": Family("Qwen2-VL text decoder", qwen2_vl_fields, llama_weights, **LAYOUT),
    "Qwen2_5_VLForConditionalGeneration": Family("Qwen2.5-VL text decoder", qwen2_vl_fields, llama_weights, **LAYOUT),
    "Qwen3VLForConditionalGeneration": Family("Qwen3-VL text decoder", qwen3_vl_fields, llama_weights, **LAYOUT),
}
MODEL_TYPES = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
               "qwen3_vl": "Qwen3VLForConditionalGeneration"}
