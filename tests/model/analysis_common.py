"""A tiny random GPT for the analysis tests (lens, scan, generate, diff): fast on two cores."""

from __future__ import annotations

import torch

from transformer_viewer.model.checkpoint import LoadedModel
from transformer_viewer.model.config import GPTConfig
from transformer_viewer.model.gpt import GPT
from transformer_viewer.model.session import Session

TINY = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=64)
PROMPT = "The cat sat on the mat because the cat was tired"


def tiny_loaded(seed: int = 0, config: GPTConfig = TINY) -> LoadedModel:
    torch.manual_seed(seed)
    model = GPT(config).eval()
    # GPT-2's init leaves every logit near zero; larger weights make predictions and masks matter.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.mul_(8.0 if "wte" not in name else 15.0)
    return LoadedModel(model=model, config=config, format="native", source="<tiny>", name="tiny")


def session_for(model: GPT) -> Session:
    """A session on a model built in the test (hand-set weights, hooks of its own)."""
    return Session(LoadedModel(model=model, config=model.config, format="native", source="<test>", name="test"))


def tiny_session(prompt: str = PROMPT, seed: int = 0) -> Session:
    s = Session(tiny_loaded(seed))
    s.set_prompt(prompt)
    return s
