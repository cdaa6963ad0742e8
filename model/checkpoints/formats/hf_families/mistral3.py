"""Mistral 3: Mistral Small 3.1/3.2 and Ministral 3, whose checkpoints are multimodal
(`Mistral3ForConditionalGeneration`) and open as their text decoder; the vision tower and its
projector are never read. Mistral Small's decoder is Mistral's. Ministral 3's
(`Ministral3ForCausalLM` on its own) adds YaRN and Llama 4's query scaling,
1 + beta * log(1 + floor(position / original context)), which is exactly 1 below the original
context (16,384 tokens in the published models): the context is capped there, so every prompt
the decoder runs is computed exactly as transformers computes it.
"""

from __future__ import annotations

from transformer_viewer.model.checkpoints.formats.hf_families.common import (
    LANGUAGE_MODEL_LAYOUT,
    Family,
    Fields,
)
from transformer_viewer.model.checkpoints.formats.hf_families.llama import llama_weights, mistral_fields
from transformer_viewer.model.checkpoints.formats.schema import describe_value

# Ministral3Config's rotary when a config gives none.
MINISTRAL3_ROPE = {"rope_type": "yarn", "rope_theta": 1_000_000.0, "factor": 16.0,
                   "original_max_position_embeddings": 16384, "beta_fast": 32.0, "beta_slow": 1.0,
                   "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1}


def ministral3_fields(f: Fields) -> dict:
    if f.hf.get("rope_parameters") is None and f.hf.get("rope_scaling") is None:
        f = Fields({**f.hf, "rope_parameters": MINISTRAL3_ROPE}, f.folder, f.arch)
    fields = {**mistral_fields(f), "head_dim": f.int("head_dim", 128)}
    params = f.hf.get("rope_parameters") or f.hf.get("rope_scaling")
    beta = f.num("llama_4_scaling_beta", 0.0, params) if isinstance(params, dict) else 0.0
    if beta:
        original = params.get("original_max_position_embeddings")
        if not isinstance(original, int) or isinstance(original, bool) or original < 1:
            raise f.bad(f"llama_4_scaling_beta needs an integer original_max_position_embeddings, got "
                        f"{describe_value(original)}")
        fields["block_size"] = min(fields["block_size"], original)  # where the query scaling is still 1
    return fields


def mistral3_fields(f: Fields) -> dict:
    """The text decoder of `text_config` (Mistral's or Ministral 3's); whether the head is the
    embedding is the top-level flag, where transformers looks (true unless it says otherwise:
    a file whose head differs from its embedding keeps its head, as in transformers)."""
    text = f.text_decoder(tie=f.flag("tie_word_embeddings", True))
    kind = text.hf.get("model_type", "mistral")
    if kind == "ministral3":
        return ministral3_fields(text)
    if kind != "mistral":
        raise f.refuse(f"a {describe_value(kind)} text decoder")
    return mistral_fields(text)


FAMILIES = {
    "Ministral3ForCausalLM": Family("Ministral 3", ministral3_fields, llama_weights),
    "Mistral3ForConditionalGeneration": Family("Mistral 3 text decoder", mistral3_fields, llama_weights,
                                               **LANGUAGE_MODEL_LAYOUT),
}
MODEL_TYPES = {"ministral3": "Ministral3ForCausalLM", "mistral3": "Mistral3ForConditionalGeneration"}
