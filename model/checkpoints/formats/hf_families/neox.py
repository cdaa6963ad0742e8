"""GPT-NeoX (Pythia), GPT-J and Phi (Phi-1, Phi-1.5, Phi-2): LayerNorm blocks whose attention
and MLP read the same input (a parallel block; NeoX with two input norms, GPT-J and Phi with
one), partial rotary positions (NeoX's and Phi's half-split pairs, GPT-J's interleaved pairs), a
plain GELU MLP and a head with a bias (GPT-J, Phi).

NeoX fuses q, k and v per head ([q_h, k_h, v_h] for each head h); ours stacks all queries,
then all keys, then all values, so the rows are regrouped.
"""

from __future__ import annotations

from transformer_viewer.model.checkpoints.formats.hf_families.common import Family, Fields, Tensors
from transformer_viewer.model.checkpoints.formats.hf_families.llama import sizes
from transformer_viewer.model.decoder.config import GPTConfig

_BUFFERS = (".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")


def neox_fields(f: Fields) -> dict:
    f.no_moe_or_alibi()
    attn_bias = f.flag("attention_bias", True)
    parallel = f.flag("use_parallel_residual", True)
    return {
        "vocab_size": f.int("vocab_size"), "n_embd": f.int("hidden_size"), "n_layer": f.int("num_hidden_layers"),
        "n_head": f.int("num_attention_heads"), "n_mlp": f.int("intermediate_size"),
        "block_size": f.int("max_position_embeddings", 2048),
        **f.rope(theta_key="rotary_emb_base", partial_key="rotary_pct", default_partial=0.25),
        "norm": "layernorm", "layer_norm_eps": f.num("layer_norm_eps", 1e-5), "bias": True,
        "qkv_bias": attn_bias, "proj_bias": attn_bias, "activation": f.activation("hidden_act", default="gelu"),
        "block": "parallel" if parallel else "sequential", "tie_embeddings": f.flag("tie_word_embeddings", False),
    }


def gptj_fields(f: Fields) -> dict:
    f.no_moe_or_alibi()
    n_embd, n_head = f.int("n_embd"), f.int("n_head")
    rotary_dim = f.hf.get("rotary_dim")
    if rotary_dim is None:
        raise f.refuse("rotary_dim null (rotary over the whole width, not per head)")
    head = n_embd // n_head if n_head > 0 else 0
    rotary_dim = f.int("rotary_dim")
    if not 0 < rotary_dim <= head:
        raise f.bad(f"rotary_dim={rotary_dim} must be between 1 and the head size {head}")
    return {
        "vocab_size": f.int("vocab_size"), "n_embd": n_embd, "n_layer": f.int("n_layer"), "n_head": n_head,
        "n_mlp": f.int("n_inner", 4 * n_embd), "block_size": f.int("n_positions", 2048),
        "positional": "rotary", "rotary_style": "gptj", "rotary_pct": rotary_dim / head,
        "norm": "layernorm", "layer_norm_eps": f.num("layer_norm_epsilon", 1e-5), "bias": True,
        "qkv_bias": False, "proj_bias": False, "activation": f.activation("activation_function", default="gelu_new"),
        "block": "parallel_shared_norm", "tie_embeddings": f.flag("tie_word_embeddings", False),
        "extra": {"head_bias": True},
    }


def phi_fields(f: Fields) -> dict:
    f.no_moe_or_alibi()
    if f.hf.get("model_type") == "phi-msft":
        raise f.bad("model_type 'phi-msft' is the older remote-code layout of Phi-1.5/Phi-2, whose weights are named "
                    "otherwise; save the model again with a recent transformers (model_type 'phi')")
    return {
        **sizes(f), "head_dim": 0,  # PhiConfig has no head_dim: always width / heads
        **f.rope(default_partial=0.5),
        "norm": "layernorm", "layer_norm_eps": f.num("layer_norm_eps", 1e-5), "bias": True,
        "qk_norm": "head" if f.flag("qk_layernorm", False) else "none",
        "activation": f.activation("hidden_act", default="gelu_new"),
        "block": "parallel_shared_norm", "tie_embeddings": f.flag("tie_word_embeddings", False),
        "extra": {"head_bias": True},
    }


def neox_weights(t: Tensors, c: GPTConfig) -> None:
    t.drop(*_BUFFERS)
    nh, hs = c.n_head, c.head_size
    t.put("wte.weight", "embed_in.weight")
    t.put("ln_f.weight", "final_layer_norm.weight")
    t.put("ln_f.bias", "final_layer_norm.bias")
    for i in range(c.n_layer):
        a, o = f"layers.{i}.", f"blocks.{i}."
        for ours, theirs in (("ln_1", "input_layernorm"), ("ln_2", "post_attention_layernorm"),
                             ("attn.c_proj", "attention.dense"), ("mlp.c_fc", "mlp.dense_h_to_4h"),
                             ("mlp.c_proj", "mlp.dense_4h_to_h")):
            t.put(f"{o}{ours}.weight", f"{a}{theirs}.weight")
            t.put(f"{o}{ours}.bias", f"{a}{theirs}.bias")
        t.put(o + "attn.c_attn.weight", a + "attention.query_key_value.weight")
        t.put(o + "attn.c_attn.bias", a + "attention.query_key_value.bias")
        for key in (o + "attn.c_attn.weight", o + "attn.c_attn.bias"):
            w = t.out.get(key)
            if w is not None and w.shape[0] == 3 * nh * hs:
                # rows (nh, 3, hs) per head -> (3, nh, hs): all q, then all k, then all v
                t.out[key] = w.view(nh, 3, hs, *w.shape[1:]).transpose(0, 1).reshape(w.shape)


def gptj_weights(t: Tensors, c: GPTConfig) -> None:
    t.drop(*_BUFFERS)
    t.put("wte.weight", "wte.weight")
    t.put("ln_f.weight", "ln_f.weight")
    t.put("ln_f.bias", "ln_f.bias")
    for i in range(c.n_layer):
        a, o = f"h.{i}.", f"blocks.{i}."
        t.put(o + "ln_1.weight", a + "ln_1.weight")
        t.put(o + "ln_1.bias", a + "ln_1.bias")
        t.put(o + "attn.c_attn.weight", *(a + f"attn.{p}_proj.weight" for p in "qkv"))
        t.put(o + "attn.c_proj.weight", a + "attn.out_proj.weight")
        for ours, theirs in (("mlp.c_fc", "mlp.fc_in"), ("mlp.c_proj", "mlp.fc_out")):
            t.put(f"{o}{ours}.weight", f"{a}{theirs}.weight")
            t.put(f"{o}{ours}.bias", f"{a}{theirs}.bias")


def phi_weights(t: Tensors, c: GPTConfig) -> None:
    t.drop(".rotary_emb.inv_freq")
    t.put("wte.weight", "embed_tokens.weight")
    t.put("ln_f.weight", "final_layernorm.weight")
    t.put("ln_f.bias", "final_layernorm.bias")
    for i in range(c.n_layer):
        a, o = f"layers.{i}.", f"blocks.{i}."
        for part in ("weight", "bias"):
            t.put(f"{o}ln_1.{part}", f"{a}input_layernorm.{part}")
            t.put(f"{o}attn.c_attn.{part}", *(f"{a}self_attn.{p}_proj.{part}" for p in "qkv"))
            t.put(f"{o}attn.c_proj.{part}", f"{a}self_attn.dense.{part}")
            t.put(f"{o}mlp.c_fc.{part}", f"{a}mlp.fc1.{part}")
            t.put(f"{o}mlp.c_proj.{part}", f"{a}mlp.fc2.{part}")
            if c.qk_norm != "none":
                t.put(f"{o}attn.q_norm.{part}", f"{a}self_attn.q_layernorm.{part}")
                t.put(f"{o}attn.k_norm.{part}", f"{a}self_attn.k_layernorm.{part}")


FAMILIES = {
    "GPTNeoXForCausalLM": Family("GPT-NeoX", neox_fields, neox_weights, ("gpt_neox.",),
                                     ("embed_out.weight", "lm_head.weight")),
    "GPTJForCausalLM": Family("GPT-J", gptj_fields, gptj_weights, ("transformer.",)),
    "PhiForCausalLM": Family("Phi", phi_fields, phi_weights),
}
MODEL_TYPES = {"gpt_neox": "GPTNeoXForCausalLM", "gptj": "GPTJForCausalLM", "phi": "PhiForCausalLM"}
