"""Tiny decoders with the family switches turned on (sliding windows, soft-capping, grouped-query
heads, parallel blocks, rotary variants), for the tests of the switches and of what is computed
on them."""

import torch

from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.kernels.attention_kernels import QUERY_BLOCK

BASE = dict(n_layer=2, n_head=4, n_embd=32, block_size=3 * QUERY_BLOCK + 16, vocab_size=300)
VARIANTS = {
    "llama_gqa": dict(positional="rotary", norm="rmsnorm", mlp="gated", activation="silu", bias=False, n_kv_head=2),
    "window_softcap": dict(positional="rotary", sliding_window=37, layer_types=("sliding", "full"),
                           attn_softcap=5.0, attn_scale=0.3, logit_softcap=3.0, norm_placement="sandwich",
                           norm="rmsnorm", norm_offset=True, embed_scale=True, n_kv_head=1, head_dim=12),
    "neox_parallel": dict(positional="rotary", rotary_pct=0.25, block="parallel", qkv_bias=True, proj_bias=False),
    "gptj_shared": dict(positional="rotary", rotary_style="gptj", rotary_pct=0.5, block="parallel_shared_norm"),
    "olmo2_post": dict(positional="rotary", norm="rmsnorm", norm_placement="post", qk_norm="all", bias=False),
    "qwen3_headnorm": dict(positional="rotary", norm="rmsnorm", qk_norm="head", head_dim=16, n_kv_head=2,
                           rope_scaling="llama3", rope_factor=8.0, rope_original_context=64),
    "nope_longrope": dict(positional="rotary", nope_layers=(1,), rotary_pct=0.5, rope_scaling="longrope",
                          rope_original_context=QUERY_BLOCK, rope_short_factor=(1.0, 3.0), rope_long_factor=(2.0, 9.0),
                          rope_attention_factor=1.2),
}


def switch_model(name: str, seed: int = 0) -> GPT:
    """The tiny decoder with the switches of VARIANTS[name], its norm gains and biases randomised."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**BASE, **VARIANTS[name])).eval()
    with torch.no_grad():  # random norm gains and biases, so a mixed-up parameter shows
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.2)
    return model
