"""Tiny random Hugging Face models of every supported family, saved into a folder, for the
parity tests: random norm weights and biases (a dropped or swapped parameter shows), configs
that switch on what each family has (GQA, sliding windows shorter than the prompt, partial
rotary, parallel blocks, soft-capping, rope scalings)."""

from __future__ import annotations

import json
import os

import torch

COMMON = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, vocab_size=96, hidden_size=32, intermediate_size=40,
              num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
NO_KV = {k: v for k, v in COMMON.items() if k != "num_key_value_heads"}
LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32}
# Phi-3.5 / Phi-4-mini's: per-frequency factors, the long set for prompts over 16 tokens here.
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": [1.0, 1.7, 2.9], "long_factor": [4.0, 9.0, 40.0]}
LONGROPE_ORIGINAL = 16

MINISTRAL3_ROPE = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 32,
                   "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1}
PIXTRAL = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
               patch_size=14, head_dim=8)

# name: (config class, model class, config kwargs, HF path of layer l's output projection)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(COMMON, rope_parameters=LLAMA3, attention_bias=True,
                                                      mlp_bias=True), "model.layers.{}.self_attn.o_proj"),
    "smollm_tied": ("LlamaConfig", "LlamaForCausalLM", dict(COMMON, num_key_value_heads=1, tie_word_embeddings=True),
                    "model.layers.{}.self_attn.o_proj"),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(COMMON, sliding_window=5, head_dim=12),
                "model.layers.{}.self_attn.o_proj"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(COMMON, use_sliding_window=True, sliding_window=6,
                                                      max_window_layers=1), "model.layers.{}.self_attn.o_proj"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(COMMON, head_dim=16, rope_parameters=YARN),
              "model.layers.{}.self_attn.o_proj"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(COMMON, rope_parameters={"rope_type": "default", "rope_theta":
                                                                            10000.0, "partial_rotary_factor": 0.5},
                                                   sliding_window=7), "model.layers.{}.self_attn.o_proj"),
    "phi3_longrope": ("Phi3Config", "Phi3ForCausalLM", dict(COMMON, rope_parameters=LONGROPE,
                                                            original_max_position_embeddings=LONGROPE_ORIGINAL),
                      "model.layers.{}.self_attn.o_proj"),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(COMMON, num_hidden_layers=4, no_rope_layer_interval=2,
                                                           use_sliding_window=True, sliding_window=5),
                "model.layers.{}.self_attn.o_proj"),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", dict(COMMON, attention_bias=True), "model.layers.{}.self_attn.o_proj"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(COMMON), "model.layers.{}.self_attn.o_proj"),
    "olmo3": ("Olmo3Config", "Olmo3ForCausalLM", dict(COMMON, num_hidden_layers=4, sliding_window=5, rope_parameters={
        "full_attention": dict(YARN, rope_theta=5e5), "sliding_attention": {"rope_type": "default", "rope_theta": 5e5}}),
              "model.layers.{}.self_attn.o_proj"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(COMMON, head_dim=12), "model.layers.{}.self_attn.o_proj"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(COMMON, head_dim=8, sliding_window=6, query_pre_attn_scalar=
                                                         20, attn_logit_softcapping=3.0, final_logit_softcapping=4.0),
               "model.layers.{}.self_attn.o_proj"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(COMMON, head_dim=8, sliding_window=5, num_hidden_layers=4,
                                                             sliding_window_pattern=2, rope_parameters={
                                                                 "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                                                    "rope_theta": 1e6},
                                                                 "sliding_attention": {"rope_type": "default",
                                                                                       "rope_theta": 1e4}}),
               "model.layers.{}.self_attn.o_proj"),
    "gemma3_multimodal": ("Gemma3Config", "Gemma3ForConditionalGeneration", dict(
        text_config=dict(COMMON, head_dim=8, sliding_window=5, num_hidden_layers=4, sliding_window_pattern=2,
                         rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
                                          "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                           patch_size=14), mm_tokens_per_image=4), "model.language_model.layers.{}.self_attn.o_proj"),
    # Ministral 3: YaRN and Llama 4's query scaling, which is 1 below the original context (32 here).
    "ministral3": ("Ministral3Config", "Ministral3ForCausalLM", dict(COMMON, head_dim=8, rope_parameters=MINISTRAL3_ROPE),
                   "model.layers.{}.self_attn.o_proj"),
    "mistral3": ("Mistral3Config", "Mistral3ForConditionalGeneration", dict(
        text_config=dict(COMMON, model_type="ministral3", head_dim=8, rope_parameters=MINISTRAL3_ROPE),
        vision_config=PIXTRAL, spatial_merge_size=1, tie_word_embeddings=False),
                 "model.language_model.layers.{}.self_attn.o_proj"),
    "mistral3_small": ("Mistral3Config", "Mistral3ForConditionalGeneration", dict(
        text_config=dict(COMMON, model_type="mistral", head_dim=12, sliding_window=None, rope_theta=1e6),
        vision_config=PIXTRAL, spatial_merge_size=1, tie_word_embeddings=False),
                       "model.language_model.layers.{}.self_attn.o_proj"),
    # Multimodal Qwen: text only, the multimodal rotary's three positions are the token's own.
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration", dict(
        text_config=dict(COMMON, rope_parameters={"rope_type": "mrope", "mrope_section": [2, 1, 1], "rope_theta": 1e4}),
        vision_config=dict(depth=1, embed_dim=16, hidden_size=32, num_heads=2, mlp_ratio=2)),
                 "model.language_model.layers.{}.self_attn.o_proj"),
    "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration", dict(
        text_config=dict(COMMON, use_sliding_window=True, sliding_window=6, max_window_layers=1,
                         rope_parameters={"rope_type": "mrope", "mrope_section": [2, 1, 1], "rope_theta": 1e4}),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                           fullatt_block_indexes=[0]), tie_word_embeddings=True),
                   "model.language_model.layers.{}.self_attn.o_proj"),
    "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration", dict(
        text_config=dict(COMMON, head_dim=8, rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1],
                                                              "mrope_interleaved": True, "rope_theta": 1e4}),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                           deepstack_visual_indexes=[0])), "model.language_model.layers.{}.self_attn.o_proj"),
    "pythia": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(NO_KV, hidden_act="gelu"), "gpt_neox.layers.{}.attention.dense"),
    "neox_sequential": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(NO_KV, use_parallel_residual=False,
                                                                    rope_parameters={"rope_type": "default",
                                                                                     "rope_theta": 500.0,
                                                                                     "partial_rotary_factor": 0.5}),
                        "gpt_neox.layers.{}.attention.dense"),
    "phi": ("PhiConfig", "PhiForCausalLM", dict(COMMON, qk_layernorm=True, hidden_act="gelu_new", rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}), "model.layers.{}.self_attn.dense"),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, vocab_size=96,
                                                   n_embd=32, n_layer=3, n_head=4, rotary_dim=4, n_positions=128),
             "transformer.h.{}.attn.out_proj"),
}


def build(name: str, seed: int = 0, **overrides):
    """A random eager-attention HF model of family `name`, in eval mode, float32 (`overrides`:
    config values to change, e.g. a vocab_size that fits a tokenizer)."""
    import transformers

    config_cls, model_cls, kwargs, _ = FAMILIES[name]
    torch.manual_seed(seed)
    if "text_config" in kwargs:  # a multimodal model: the overrides are its text decoder's
        kwargs = dict(kwargs, text_config={**kwargs["text_config"], **overrides})
        overrides = {}
    config = getattr(transformers, config_cls)(**{**kwargs, **overrides})
    config._attn_implementation = "eager"
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:  # norm gains and biases, away from their 1 / 0 start
                p.add_(torch.randn_like(p) * 0.3)
    return model


def vocab(hf) -> int:
    """The vocabulary of a family's HF model (a multimodal one's is its text decoder's)."""
    return hf.config.get_text_config().vocab_size


def text_params(hf) -> int:
    """Parameters of what our decoder runs: all of them, less a multimodal model's vision part."""
    return sum(p.numel() for n, p in hf.named_parameters() if ".vision_tower." not in f".{n}"
               and ".multi_modal_projector." not in f".{n}" and ".visual." not in f".{n}")


# The family `info` names for each architecture (independent of the loader's own table).
FAMILY_OF = {"LlamaForCausalLM": "Llama", "MistralForCausalLM": "Mistral", "Qwen2ForCausalLM": "Qwen2",
             "Qwen3ForCausalLM": "Qwen3", "Phi3ForCausalLM": "Phi-3", "OlmoForCausalLM": "OLMo",
             "Olmo2ForCausalLM": "OLMo 2", "Olmo3ForCausalLM": "OLMo 3", "SmolLM3ForCausalLM": "SmolLM3", "GemmaForCausalLM": "Gemma", "Gemma2ForCausalLM": "Gemma 2",
             "Gemma3ForCausalLM": "Gemma 3", "Gemma3ForConditionalGeneration": "Gemma 3 text decoder",
             "Qwen2VLForConditionalGeneration": "Qwen2-VL text decoder",
             "Qwen2_5_VLForConditionalGeneration": "Qwen2.5-VL text decoder",
             "Qwen3VLForConditionalGeneration": "Qwen3-VL text decoder", "Ministral3ForCausalLM": "Ministral 3",
             "Mistral3ForConditionalGeneration": "Mistral 3 text decoder", "GPTNeoXForCausalLM": "GPT-NeoX", "GPTJForCausalLM": "GPT-J", "PhiForCausalLM": "Phi",
             "GPT2LMHeadModel": "GPT-2"}
SENTENCEPIECE_STYLE = ("llama", "smollm_tied", "mistral", "phi3", "phi3_longrope", "gemma", "gemma2", "gemma3",
                       "gemma3_multimodal")
WITH_GPT2 = sorted(FAMILIES) + ["gpt2"]


def save_with_tokenizer(name: str, folder: str):
    """A family's tiny model (`name` from WITH_GPT2) saved with a tokenizer.json of its style
    (SentencePiece-style with a BOS, or byte-level BPE) and a vocabulary that fits it; the HF model."""
    from tests.helpers import tokenizers as tc
    from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer

    (tc.metaspace if name in SENTENCEPIECE_STYLE else tc.byte_level)(folder)
    vocab = load_tokenizer(folder).n_vocab
    if name == "gpt2":
        from tests.helpers.models import hf_config, hf_model

        hf = hf_model(hf_config(vocab_size=vocab))
    else:
        hf = build(name, vocab_size=vocab)
    hf.save_pretrained(folder)
    return hf


def save(model, folder: str) -> str:
    model.save_pretrained(folder)
    return folder


def published_form(folder: str) -> None:
    """Rewrite config.json as published checkpoints spell it: rope_theta / rope_scaling (NeoX:
    rotary_pct / rotary_emb_base; Gemma 3: rope_local_base_freq and sliding_window_pattern
    instead of layer_types; Gemma: the legacy hidden_act "gelu"). Multimodal Qwen and Mistral 3:
    the same inside text_config, which Qwen2/2.5-VL's files spread over the top level."""
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    model_type = cfg["model_type"]
    if model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "mistral3"):
        _published(cfg["text_config"])
        if model_type in ("qwen2_vl", "qwen2_5_vl"):
            text = cfg.pop("text_config")
            cfg = {**{k: v for k, v in text.items() if v is not None and k != "model_type"}, **cfg}
    elif model_type != "gemma3":  # multimodal Gemma 3: test_family_loading's own published form
        _published(cfg)
    with open(path, "w") as f:
        json.dump(cfg, f)


def _published(cfg: dict) -> None:
    rope = cfg.pop("rope_parameters", None) or {}
    model_type = cfg["model_type"]
    if model_type == "gemma3_text":
        local, rope = rope["sliding_attention"], rope["full_attention"]
        cfg["rope_local_base_freq"] = local["rope_theta"]
        cfg["sliding_window_pattern"] = cfg.pop("_sliding_window_pattern", 6)
        cfg.pop("layer_types")
    if model_type == "olmo3":  # one rope_theta; rope_scaling for the full layers alone
        rope = rope["full_attention"]
    if model_type == "gemma2":
        cfg.pop("layer_types")
    if model_type == "gemma":
        cfg["hidden_act"] = "gelu"
    theta = rope.pop("rope_theta", 10000.0)
    partial = rope.pop("partial_rotary_factor", None)
    kind = rope.pop("rope_type", "default")
    if model_type == "gpt_neox":
        cfg["rotary_emb_base"], cfg["rotary_pct"] = theta, partial
    else:
        cfg["rope_theta"] = theta
        if partial is not None:
            cfg["partial_rotary_factor"] = partial
    if model_type in ("qwen2_vl_text", "qwen2_5_vl_text") and "mrope_section" in rope:
        kind = "mrope"  # as Qwen2/2.5-VL's files name it
    # Qwen3-VL keeps its default rotary's mrope keys in rope_scaling.
    cfg["rope_scaling"] = None if kind == "default" and not rope else {"type": kind, **rope}
