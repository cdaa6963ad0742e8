"""A model's family and the decoder switches it uses, in words, for `info` and the status bar.

A Hugging Face folder names its family (the architecture it was read as); our own checkpoints
are described by their switches: "GPT-2-style" or "Llama-style" when they match one of the
training presets, "custom" otherwise.
"""

from __future__ import annotations

from transformer_viewer.model.decoder.config import PRESETS, GPTConfig


def family_name(config: GPTConfig, training: dict | None = None) -> str:
    named = (training or {}).get("family") if isinstance(training, dict) else None
    if isinstance(named, str) and named:
        return named
    for preset, style in (("gpt2", "GPT-2-style"), ("llama", "Llama-style")):
        if all(getattr(config, k) == v for k, v in PRESETS[preset].items()) and not switches(config, preset):
            return style
    return "custom"


def switches(config: GPTConfig, relative_to: str | None = None) -> list[str]:
    """The switches that differ from GPT-2 (or from a preset), each a few words."""
    c, base = config, GPTConfig(**PRESETS.get(relative_to or "gpt2", {}))
    out = []
    if c.positional == "rotary":
        scaled = "" if c.rope_scaling == "none" else f", {c.rope_scaling} x{c.rope_factor:g}"
        if c.rope_scaling == "dynamic":
            scaled += f" past {c.rope_original_context:,} tokens"
        part = "" if c.rotary_pct == 1.0 else f" on {c.rotary_pct:.0%} of each head"
        local = "" if not c.rope_local_base else ", sliding layers unscaled" if c.rope_local_base == c.rope_base \
            else f", sliding layers base {c.rope_local_base:g}"
        if (c.rotary_style, c.rotary_pct, c.rope_scaling, c.rope_local_base) != ("neox", 1.0, "none", 0.0) \
                or base.positional != "rotary" or c.rope_base != 10000.0:
            out.append(f"rotary ({c.rotary_style}, base {c.rope_base:g}{scaled}{part}{local})")
        if c.nope_layers:
            out.append(f"no positions on {len(c.nope_layers)} of {c.n_layer} layers (NoPE)")
    elif c.positional != base.positional:
        out.append(f"{c.positional} positions")
    if c.norm != base.norm or c.norm_offset:
        out.append({"rmsnorm": "RMSNorm", "layernorm": "LayerNorm", "layernorm_plain": "LayerNorm without weights"}
                   [c.norm] + (" (1 + w)" if c.norm_offset else ""))
    if c.norm_placement != "pre":
        out.append({"sandwich": "norms before and after each sublayer", "post": "norms after each sublayer"}
                   [c.norm_placement])
    if c.kv_heads != c.n_head:
        out.append(f"{c.kv_heads} key/value heads for {c.n_head} query heads")
    if c.head_dim and c.head_dim * c.n_head != c.n_embd:
        out.append(f"head size {c.head_dim}")
    if c.qk_norm != "none":
        out.append("QK-norm " + ("per head" if c.qk_norm == "head" else "over all heads"))
    if c.attn_scale:
        out.append(f"softmax scale {c.attn_scale:.4g}")
    if c.attn_softcap:
        out.append(f"attention soft-cap {c.attn_softcap:g}")
    if c.sliding_window:
        n = sum(c.layer_is_sliding(layer) for layer in range(c.n_layer))
        out.append(f"sliding window {c.sliding_window} on {n} of {c.n_layer} layers")
    if c.mlp != base.mlp or c.activation != base.activation:
        out.append(("gated MLP" if c.mlp == "gated" else "MLP") + f" ({c.activation})")
    if c.block != "sequential":
        out.append("parallel attention and MLP" + (", one norm" if c.block == "parallel_shared_norm" else ""))
    if c.embed_scale:
        out.append("embedding x sqrt(n_embd)")
    if c.logit_softcap:
        out.append(f"logit soft-cap {c.logit_softcap:g}")
    return out
