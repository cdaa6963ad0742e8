"""Triggers for the messages of what a checkpoint says about itself: special-token ids no
vocabulary has, tutorial tensors of the wrong shape, shards holding tensors the index puts
elsewhere, and a model whose outputs are not finite (the files are built as in `corpus_configs`)."""

from __future__ import annotations

import json
import os

import torch

from tests.hardening import corpus_configs as cc
from tests.hardening.message_case import Case, raised
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint


def generation_id(value):
    def trigger(ctx):
        folder = cc.family_folder(str(ctx.tmp), "generation")
        with open(os.path.join(folder, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": value}, f)
        return raised(lambda: load_checkpoint(folder))
    return trigger


def tutorial_k_narrow(ctx):
    state = cc.tutorial_state()
    state["blocks.0.attn.in_proj_weight"] = torch.randn(32, 16)
    return raised(lambda: load_checkpoint(cc.save_tutorial(str(ctx.tmp / "tutorial.pt"), state)))


def shards(place):
    return lambda ctx: raised(lambda: load_checkpoint(cc.sharded_folder(str(ctx.tmp), "sharded", place)))


def huge_weights(ctx):
    return ctx.cli("predict", cc.huge_weights(str(ctx.tmp / "huge.safetensors")), "--prompt", "The cat")


CASES = [
    Case("generation_config.json bos_token_id as a string", generation_id("1"),
         "bos_token_id must be a token id (an integer) or a list of them, got '1'"),
    Case("generation_config.json bos_token_id of 31 digits", generation_id(10**30),
         "bos_token_id is an integer of about 31 digits, outside the tokenizer's vocabulary"),
    Case("a tutorial in_proj_weight for another width", tutorial_k_narrow,
         "shape mismatch for blocks.0.attn.in_proj_weight: expected (48, 16), found (32, 16)"),
    Case("a shard holding a tensor the index puts in the other", shards(cc.stale_copy),
         "holds model.embed_tokens.weight, which the index puts in model-0000"),
    Case("a shard holding a tensor the index does not list", shards(cc.unlisted), "which the index does not list"),
    Case("a model whose logits overflow", huge_weights, "the model's next-token probabilities are not finite"),
]
