"""Tiny models for every test folder: random models of our own and of Hugging Face's GPT-2,
written to disk in each layout the loader reads, and sessions on them.

Two weight recipes, both seeded: `tiny_loaded` draws every weight at a scale that makes
attention peaked (checkpoints, capture, parity); `scaled_init_loaded` keeps GPT-2's
initialisation and scales it up (the analysis tests: lens, scan, generation, diffs)."""

from __future__ import annotations

import os

import torch

from transformer_viewer.model.checkpoints.checkpoint import LoadedModel, save_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT

TINY = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=64, vocab_size=50257)


def randomize_(model: torch.nn.Module, seed: int = 0, scale: float = 1.0) -> torch.nn.Module:
    """Weights large enough that logits, attention and masks matter (GPT-2's init leaves
    attention nearly uniform): unit-variance activations, peaked patterns, varied LayerNorms."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                embedding = any(s in name for s in ("wte", "wpe", "emb"))
                std = 1.0 if embedding else scale * 1.5 / min(p.shape) ** 0.5  # Linear or Conv1D alike
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif name.endswith("weight"):  # LayerNorm gains
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model


def tiny_gpt(config: GPTConfig = TINY, seed: int = 0) -> GPT:
    return randomize_(GPT(config), seed).eval()


def tiny_loaded(config: GPTConfig = TINY, seed: int = 0) -> LoadedModel:
    return LoadedModel(model=tiny_gpt(config, seed), config=config, format="native", source="<tiny>", name="tiny")


def save_tiny(path, config: GPTConfig = TINY, seed: int = 0) -> GPT:
    model = tiny_gpt(config, seed)
    save_checkpoint(model, str(path))
    return model


# -- Hugging Face ---------------------------------------------------------------------------
def hf_config(**kw):
    from transformers import GPT2Config

    args = dict(n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab_size=50257, bos_token_id=0, eos_token_id=0)
    args.update(kw)
    return GPT2Config(**args)


def hf_model(config=None, seed: int = 0, randomize: bool = True):
    """A random GPT2LMHeadModel in eval mode with eager attention (so it can return patterns)."""
    from transformers import GPT2LMHeadModel

    torch.manual_seed(seed)
    config = config or hf_config()
    config._attn_implementation = "eager"
    model = GPT2LMHeadModel(config)
    if randomize:
        randomize_(model, seed)
    return model.eval()


def hf_state(model, prefix: bool = True, old_buffers: bool = False) -> dict[str, torch.Tensor]:
    """The model's weights as a file would hold them: with or without `transformer.`, and with
    the `attn.bias` / `attn.masked_bias` buffers older transformers versions saved."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state.pop("lm_head.weight", None)  # tied: save_pretrained leaves it out too
    if old_buffers:
        T = model.config.n_positions
        for layer in range(model.config.n_layer):
            state[f"transformer.h.{layer}.attn.bias"] = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
            state[f"transformer.h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)
    if not prefix:
        state = {k.removeprefix("transformer."): v for k, v in state.items()}
    return state


def save_hf_folder(model, folder, weights: str = "safetensors", prefix: bool = True, old_buffers: bool = False) -> str:
    """A Hugging Face model folder: config.json plus model.safetensors or pytorch_model.bin."""
    from safetensors.torch import save_file

    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    if weights == "pretrained":
        model.save_pretrained(folder)
        return folder
    model.config.save_pretrained(folder)
    state = hf_state(model, prefix=prefix, old_buffers=old_buffers)
    if weights == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(folder, "model.safetensors"),
                  metadata={"format": "pt"})
    else:
        torch.save(state, os.path.join(folder, "pytorch_model.bin"))
    return folder


def nanogpt_checkpoint(model, compiled: bool = True, mask_buffers: bool = True) -> dict:
    """nanoGPT's ckpt.pt dict from an HF GPT-2 (whose activation must be exact `gelu`): Linear
    layout (Conv1D transposed), tied lm_head present, `_orig_mod.` prefix, attn.bias buffers."""
    c = model.config
    state = {}
    for k, v in model.state_dict().items():
        if k.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        v = v.detach().clone()
        if k.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")):
            v = v.t().contiguous()  # nanoGPT uses nn.Linear: (out, in)
        state[k] = v
    state["lm_head.weight"] = state["transformer.wte.weight"]
    if mask_buffers:
        T = c.n_positions
        for layer in range(c.n_layer):
            state[f"transformer.h.{layer}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    if compiled:
        state = {"_orig_mod." + k: v for k, v in state.items()}
    model_args = dict(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, block_size=c.n_positions,
                      bias=True, vocab_size=c.vocab_size, dropout=0.0)
    return {"model": state, "model_args": model_args, "optimizer": {}, "iter_num": 5000,
            "best_val_loss": torch.tensor(2.5), "config": {"dataset": "openwebtext", "batch_size": 12}}


def nanogpt_from_ours(model: GPT) -> dict:
    """nanoGPT's ckpt.pt dict from one of our models (for layouts HF cannot make, e.g. bias=False)."""
    c = model.config
    state = {}
    for k, v in model.state_dict().items():
        name = "lm_head.weight" if k == "lm_head.weight" else "transformer." + k.replace("blocks.", "h.", 1)
        state["_orig_mod." + name] = v.detach().clone()
    model_args = dict(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, block_size=c.block_size,
                      bias=c.bias, vocab_size=c.vocab_size, dropout=0.0)
    return {"model": state, "model_args": model_args, "iter_num": 1, "best_val_loss": 3.0}


# -- GPT-2's init, scaled up: the analysis tests ---------------------------------------------
ANALYSIS_PROMPT = "The cat sat on the mat because the cat was tired"


def scaled_init_loaded(config: GPTConfig = TINY, seed: int = 0) -> LoadedModel:
    torch.manual_seed(seed)
    model = GPT(config).eval()
    # GPT-2's init leaves every logit near zero; larger weights make predictions and masks matter.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.mul_(8.0 if "wte" not in name else 15.0)
    return LoadedModel(model=model, config=config, format="native", source="<tiny>", name="tiny")


def session_for(model: GPT):
    """A session on a model built in the test (hand-set weights, hooks of its own)."""
    from transformer_viewer.model.capture.session import Session

    return Session(LoadedModel(model=model, config=model.config, format="native", source="<test>", name="test"))


def tiny_session(prompt: str = ANALYSIS_PROMPT, seed: int = 0, keep_full: bool = True):
    from transformer_viewer.model.capture.session import Session

    s = Session(scaled_init_loaded(seed=seed), keep_full=keep_full)  # the full arrays too, for the diff tests
    s.set_prompt(prompt)
    return s
