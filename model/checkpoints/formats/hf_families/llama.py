"""The Llama layout and its relatives: separate (or fused, Phi-3) q/k/v/o projections, a gated
MLP (gate/up/down), RMSNorm (OLMo: LayerNorm without parameters), rotary positions.

Covers LlamaForCausalLM (Llama 2/3.x, SmolLM/SmolLM2, TinyLlama), MistralForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, OlmoForCausalLM, Olmo2ForCausalLM,
Olmo3ForCausalLM and SmolLM3ForCausalLM.
"""

from __future__ import annotations

from transformer_viewer.model.checkpoints.formats.hf_families.common import Family, Fields, Tensors
from transformer_viewer.model.checkpoints.formats.schema import describe_value
from transformer_viewer.model.decoder.config import GPTConfig


def sizes(f: Fields) -> dict:
    n_head = f.int("num_attention_heads")
    out = {
        "vocab_size": f.int("vocab_size"), "n_embd": f.int("hidden_size"), "n_layer": f.int("num_hidden_layers"),
        "n_head": n_head, "n_kv_head": f.int("num_key_value_heads", n_head), "n_mlp": f.int("intermediate_size"),
        "block_size": f.int("max_position_embeddings", 2048), "head_dim": f.int("head_dim", 0),
    }
    return out


def llama_fields(f: Fields, eps_default: float = 1e-6, rope_aliases: dict | None = None) -> dict:
    f.no_moe_or_alibi()
    attn_bias = f.flag("attention_bias", False)
    return {
        **sizes(f), **f.rope(aliases=rope_aliases), "norm": "rmsnorm", "layer_norm_eps": f.num("rms_norm_eps", eps_default),
        "mlp": "gated", "activation": f.activation("hidden_act", default="silu"), "bias": False,
        "qkv_bias": attn_bias, "proj_bias": attn_bias, "mlp_bias": f.flag("mlp_bias", False),
        "tie_embeddings": f.flag("tie_word_embeddings", False),
    }


def mistral_fields(f: Fields) -> dict:
    window = f.int("sliding_window", 0)
    return {**llama_fields(f), "sliding_window": window}  # every layer slides


def qwen_sliding(f: Fields, n_layer: int) -> dict:
    """Qwen2/3: sliding layers only with use_sliding_window, from max_window_layers on (or as layer_types says)."""
    if not f.flag("use_sliding_window", False):
        return {}
    window = f.int("sliding_window", 4096)
    types = f.layer_types(n_layer)
    if types is None:
        first = f.int("max_window_layers", 28)
        types = tuple("sliding" if i >= first else "full" for i in range(n_layer))
    return {"sliding_window": window, "layer_types": types}


def qwen2_fields(f: Fields) -> dict:
    fields = llama_fields(f)
    fields.update(qkv_bias=True, proj_bias=False, **qwen_sliding(f, fields["n_layer"]))
    return fields


def qwen3_fields(f: Fields) -> dict:
    fields = llama_fields(f)
    fields.update(qk_norm="head", head_dim=f.int("head_dim", 128), **qwen_sliding(f, fields["n_layer"]))
    return fields


def phi3_fields(f: Fields) -> dict:
    # transformers reads Phi-3's older scaling names "su" and "yarn" as longrope.
    fields = llama_fields(f, eps_default=1e-5, rope_aliases={"su": "longrope", "yarn": "longrope"})
    fields.update(qkv_bias=False, proj_bias=False, mlp_bias=False, sliding_window=f.int("sliding_window", 0))
    if fields.get("rope_scaling", "none") not in ("none", "longrope"):  # as transformers' Phi3Config checks
        raise f.refuse(f"rope scaling {fields['rope_scaling']!r} (Phi-3 takes longrope alone)")
    return fields


def olmo_fields(f: Fields) -> dict:
    if f.hf.get("clip_qkv") is not None:
        raise f.refuse(f"clip_qkv={f.hf['clip_qkv']!r} (queries, keys and values clamped)")
    fields = llama_fields(f)
    fields.update(norm="layernorm_plain", layer_norm_eps=1e-5)  # OlmoLayerNorm's fixed eps
    return fields


def olmo2_fields(f: Fields) -> dict:
    fields = llama_fields(f, eps_default=1e-5)
    fields.update(norm_placement="post", qk_norm="all")
    return fields


def olmo3_fields(f: Fields) -> dict:
    """OLMo 2 with sliding-window layers (three in four by default) whose rotary is unscaled;
    a scaling (YaRN in the long-context models) applies to the full layers only."""
    fields = olmo2_fields(f)
    fields.update(f.rope(default_theta=500_000.0))
    n_layer = fields["n_layer"]
    types = f.layer_types(n_layer) or tuple("sliding" if (i + 1) % 4 else "full" for i in range(n_layer))
    fields.update(sliding_window=f.int("sliding_window", 4096), layer_types=types,
                  rope_local_base=f.sliding_rope_base(fields["rotary_pct"], 500_000.0))
    return fields


def smollm3_fields(f: Fields) -> dict:
    """Llama with NoPE layers: `no_rope_layers` says per layer whether it rotates (1) or not
    (0), by default every fourth layer not; sliding windows on the layers `layer_types` names
    (by default the NoPE layers, with use_sliding_window)."""
    fields = llama_fields(f)
    n_layer = fields["n_layer"]
    fields.update(f.rope(default_theta=2_000_000.0), tie_embeddings=f.flag("tie_word_embeddings", True),
                  block_size=f.int("max_position_embeddings", 32768))
    flags = f.hf.get("no_rope_layers")
    if flags is None:
        interval = f.int("no_rope_layer_interval", 4)
        if interval < 1:
            raise f.bad(f"no_rope_layer_interval must be at least 1, got {interval}")
        flags = [int((i + 1) % interval != 0) for i in range(n_layer)]
    if not isinstance(flags, list) or len(flags) < n_layer or any(x not in (0, 1) or isinstance(x, float)
                                                                  for x in flags[:n_layer]):
        raise f.bad(f"no_rope_layers must list 1 (rotary) or 0 (none) for each of the {n_layer} layers, got "
                    f"{describe_value(flags)}")
    nope = tuple(i for i in range(n_layer) if not flags[i])
    types = f.layer_types(n_layer)
    if types is None:
        slides = f.flag("use_sliding_window", False) and f.hf.get("sliding_window") is not None
        types = tuple("sliding" if slides and i in nope else "full" for i in range(n_layer))
    if "sliding" in types:
        fields.update(sliding_window=f.int("sliding_window"), layer_types=types)
    return {**fields, "nope_layers": nope}


def layers(t: Tensors, c: GPTConfig, norms: dict[str, str], fused: bool = False) -> None:
    """Per-layer tensors; `norms` maps our norm names (ln_1, ...) to the file's."""
    t.drop(".rotary_emb.inv_freq")  # older saves carry the rotary table; we compute it
    for i in range(c.n_layer):
        a, o = f"layers.{i}.", f"blocks.{i}."
        if fused:
            t.put(o + "attn.c_attn.weight", a + "self_attn.qkv_proj.weight")
            t.put(o + "mlp.c_fc.weight", a + "mlp.gate_up_proj.weight")
        else:
            t.put(o + "attn.c_attn.weight", *(a + f"self_attn.{p}_proj.weight" for p in "qkv"))
            t.put(o + "mlp.c_fc.weight", a + "mlp.gate_proj.weight", a + "mlp.up_proj.weight")
        if c.uses_bias("qkv"):
            t.put(o + "attn.c_attn.bias", *(a + f"self_attn.{p}_proj.bias" for p in "qkv"))
        t.put(o + "attn.c_proj.weight", a + "self_attn.o_proj.weight")
        if c.uses_bias("proj"):
            t.put(o + "attn.c_proj.bias", a + "self_attn.o_proj.bias")
        if c.uses_bias("mlp"):
            t.put(o + "mlp.c_fc.bias", a + "mlp.gate_proj.bias", a + "mlp.up_proj.bias")
            t.put(o + "mlp.c_proj.bias", a + "mlp.down_proj.bias")
        t.put(o + "mlp.c_proj.weight", a + "mlp.down_proj.weight")
        if c.qk_norm != "none":
            t.put(o + "attn.q_norm.weight", a + "self_attn.q_norm.weight")
            t.put(o + "attn.k_norm.weight", a + "self_attn.k_norm.weight")
        for ours, theirs in norms.items():
            t.put(o + ours + ".weight", a + theirs + ".weight")


def embeddings(t: Tensors, c: GPTConfig, final_norm: bool = True) -> None:
    t.put("wte.weight", "embed_tokens.weight")
    if final_norm:
        t.put("ln_f.weight", "norm.weight")


def llama_weights(t: Tensors, c: GPTConfig) -> None:
    embeddings(t, c)
    layers(t, c, {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm"})


def phi3_weights(t: Tensors, c: GPTConfig) -> None:
    embeddings(t, c)
    layers(t, c, {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm"}, fused=True)


def olmo_weights(t: Tensors, c: GPTConfig) -> None:
    embeddings(t, c, final_norm=False)  # its norms have no parameters
    layers(t, c, {})


def olmo2_weights(t: Tensors, c: GPTConfig) -> None:
    embeddings(t, c)
    layers(t, c, {"ln_post_attn": "post_attention_layernorm", "ln_post_mlp": "post_feedforward_layernorm"})


FAMILIES = {
    "LlamaForCausalLM": Family("Llama", llama_fields, llama_weights),
    "MistralForCausalLM": Family("Mistral", mistral_fields, llama_weights),
    "Qwen2ForCausalLM": Family("Qwen2", qwen2_fields, llama_weights),
    "Qwen3ForCausalLM": Family("Qwen3", qwen3_fields, llama_weights),
    "Phi3ForCausalLM": Family("Phi-3", phi3_fields, phi3_weights),
    "OlmoForCausalLM": Family("OLMo", olmo_fields, olmo_weights),
    "Olmo2ForCausalLM": Family("OLMo 2", olmo2_fields, olmo2_weights),
    "Olmo3ForCausalLM": Family("OLMo 3", olmo3_fields, olmo2_weights),
    "SmolLM3ForCausalLM": Family("SmolLM3", smollm3_fields, llama_weights),
}
MODEL_TYPES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
               "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM", "olmo": "OlmoForCausalLM",
               "olmo2": "Olmo2ForCausalLM", "olmo3": "Olmo3ForCausalLM",
               "smollm3": "SmolLM3ForCausalLM"}
