"""Gemma, Gemma 2 and Gemma 3: the Llama layout with RMSNorm weights applied as (1 + w), the
embedding scaled by sqrt(n_embd), GeGLU (tanh GELU) MLPs and tied heads. Gemma 2 adds norms
after each sublayer, a softmax scale from `query_pre_attn_scalar`, attention and final-logit
soft-capping and alternating sliding-window layers; Gemma 3 adds per-head QK-norm and a
separate rotary base for its sliding layers. Gemma 3's multimodal checkpoints (4B and up) open
as their text decoder.
"""

from __future__ import annotations

from transformer_viewer.model.checkpoints.formats.hf_families.common import (
    LANGUAGE_MODEL_LAYOUT,
    Family,
    Fields,
    Tensors,
)
from transformer_viewer.model.checkpoints.formats.hf_families.llama import embeddings, layers, sizes
from transformer_viewer.model.decoder.config import GPTConfig


def gemma_fields(f: Fields) -> dict:
    f.no_moe_or_alibi()
    attn_bias = f.flag("attention_bias", False)
    return {
        **sizes(f), **f.rope(), "head_dim": f.int("head_dim", 256), "norm": "rmsnorm", "norm_offset": True,
        "layer_norm_eps": f.num("rms_norm_eps", 1e-6), "embed_scale": True, "mlp": "gated",
        "activation": f.activation("hidden_activation", "hidden_act", default="gelu_pytorch_tanh",
                                   legacy_gelu_tanh=True),
        "bias": False, "qkv_bias": attn_bias, "proj_bias": attn_bias,
        "tie_embeddings": f.flag("tie_word_embeddings", True),
    }


def softcap(f: Fields, key: str, default: float | None) -> float:
    value = f.hf.get(key, default)
    return 0.0 if value is None else f.num(key, default)


def gemma2_fields(f: Fields, pattern_default: int = 2) -> dict:
    fields = gemma_fields(f)
    n_layer = fields["n_layer"]
    types = f.layer_types(n_layer)
    if types is None:  # the published form: every pattern-th layer is global, the rest slide
        pattern = f.int("sliding_window_pattern", f.hf.get("_sliding_window_pattern") or pattern_default)
        if pattern < 1:
            raise f.bad(f"sliding_window_pattern must be at least 1, got {pattern}")
        types = tuple("sliding" if (i + 1) % pattern else "full" for i in range(n_layer))
    scalar = f.num("query_pre_attn_scalar", 256)
    if scalar <= 0:
        raise f.bad(f"query_pre_attn_scalar must be positive, got {scalar}")
    fields.update(norm_placement="sandwich", attn_scale=scalar ** -0.5 if scalar else 0.0,
                  attn_softcap=softcap(f, "attn_logit_softcapping", 50.0),
                  logit_softcap=softcap(f, "final_logit_softcapping", 30.0),
                  sliding_window=f.int("sliding_window", 4096), layer_types=types)
    return fields


# Gemma3TextConfig's defaults for what the Llama-layout readers need: the text_config of the
# published multimodal checkpoints leaves out every value equal to them.
GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                        "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 131_072}


def gemma3_fields(f: Fields) -> dict:
    f = Fields({**GEMMA3_TEXT_DEFAULTS, **f.hf}, f.folder, f.arch)
    if f.hf.get("use_bidirectional_attention"):
        raise f.refuse("use_bidirectional_attention (attention that sees later tokens)")
    fields = gemma2_fields(f, pattern_default=6)
    fields.update(f.rope(default_theta=1_000_000.0))
    local_base = f.sliding_rope_base(fields["rotary_pct"], 10_000.0, theta_key="rope_local_base_freq")
    fields.update(qk_norm="head", rope_local_base=local_base,
                  attn_softcap=softcap(f, "attn_logit_softcapping", None),
                  logit_softcap=softcap(f, "final_logit_softcapping", None))
    return fields


def gemma3_multimodal_fields(f: Fields) -> dict:
    """Gemma 3's multimodal checkpoints (4B and up) run as their text decoder, which is all a
    text prompt goes through; the decoder's config is `text_config`, but whether the head is
    the embedding is the top-level `tie_word_embeddings`, where transformers looks."""
    return gemma3_fields(f.text_decoder(tie=f.flag("tie_word_embeddings", True)))


def gemma_weights(t: Tensors, c: GPTConfig) -> None:
    embeddings(t, c)
    layers(t, c, {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm"})


def gemma2_weights(t: Tensors, c: GPTConfig) -> None:
    embeddings(t, c)
    layers(t, c, {"ln_1": "input_layernorm", "ln_post_attn": "post_attention_layernorm",
                  "ln_2": "pre_feedforward_layernorm", "ln_post_mlp": "post_feedforward_layernorm"})


FAMILIES = {
    "GemmaForCausalLM": Family("Gemma", gemma_fields, gemma_weights),
    "Gemma2ForCausalLM": Family("Gemma 2", gemma2_fields, gemma2_weights),
    "Gemma3ForCausalLM": Family("Gemma 3", gemma3_fields, gemma2_weights),
    "Gemma3ForConditionalGeneration": Family("Gemma 3 text decoder", gemma3_multimodal_fields, gemma2_weights,
                                             **LANGUAGE_MODEL_LAYOUT),
}
MODEL_TYPES = {"gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
               "gemma3": "Gemma3ForConditionalGeneration"}
