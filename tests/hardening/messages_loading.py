"""Triggers for the messages of loading a model folder and its tokenizer: files that lead
elsewhere (a link out of the folder, a cache snapshot's link into another repository's blobs/),
tokenizer.json regexes that could stall the tokenizer, tokenizer_config.json switches that ask
for a token the files lack, and a prompt too long to tokenize."""

from __future__ import annotations

import json
import os

from tests.hardening.message_case import Case, raised
from tests.helpers import tokenizers as tc
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.tokenizers.tokenizer import MAX_PROMPT_CHARS
from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer


def tokenizer_link_out(ctx):
    folder = tc.metaspace(str(ctx.tmp / "tok"))
    os.replace(os.path.join(folder, "tokenizer.json"), ctx.tmp / "elsewhere.json")
    os.symlink(ctx.tmp / "elsewhere.json", os.path.join(folder, "tokenizer.json"))
    return raised(lambda: load_tokenizer(folder))


def blob_of_another_repo(ctx):
    """A cache snapshot whose config.json links into another repository's blobs/."""
    snap = ctx.tmp / "hub" / "models--org--a" / "snapshots" / "rev"
    snap.mkdir(parents=True)
    (ctx.tmp / "hub" / "models--org--a" / "blobs").mkdir()
    other = ctx.tmp / "hub" / "models--org--b" / "blobs"
    other.mkdir(parents=True)
    (other / "0123").write_text("{}")
    os.symlink(os.path.join("..", "..", "..", "models--org--b", "blobs", "0123"), snap / "config.json")
    return raised(lambda: load_checkpoint(str(snap)))


def hostile_pre_tokenizer(*patterns):
    def trigger(ctx):
        folder = tc.byte_level(str(ctx.tmp / "hostile"))
        path = os.path.join(folder, "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False} for p in patterns]}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        return raised(lambda: load_tokenizer(folder))
    return trigger


def shard_name_with_nul(ctx):
    from tests.hardening.family_folders import llama_folder

    folder = llama_folder(str(ctx.tmp / "nul"))
    os.remove(os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"weight_map": {"lm_head.weight": "model\x00.safetensors"}}, f)
    return raised(lambda: load_checkpoint(folder))


def eos_not_named(ctx):
    folder = tc.metaspace(str(ctx.tmp / "noeos"), config={"bos_token": "<s>", "add_eos_token": True})
    return raised(lambda: load_tokenizer(folder))


CASES = [
    Case("tokenizer.json links out of its folder", tokenizer_link_out,
         "elsewhere.json, outside the model folder (a model folder's files must lie inside it); copy the file"),
    Case("a cache snapshot's link into another repository's blobs", blob_of_another_repo,
         "models--org--b/blobs/0123, outside the model folder (a cache snapshot may link only into its own "
         "repository's blobs/)"),
    Case("a regex with nested quantifiers", hostile_pre_tokenizer("(a+)+$"),
         "the regex '(a+)+$' repeats a group that holds a repeat (nested quantifiers), a shape that can stall the "
         "tokenizer on one line of text"),
    Case("too many regexes", hostile_pre_tokenizer(*[f"x{i}" for i in range(40)]),
         "its normalizer and pre-tokenizer run 40 regexes"),
    Case("a shard name with a NUL byte", shard_name_with_nul,
         "shard 'model\\x00.safetensors' refused: a file name with a NUL byte"),
    Case("add_eos_token without an EOS", eos_not_named, "add_eos_token is true but it names no eos_token"),
    Case("a prompt too long to tokenize", lambda ctx: ctx.cli("predict", "--checkpoint", ctx.ckpt, "--prompt",
                                                              "a" * (MAX_PROMPT_CHARS + 1)),
         f"the prompt is {MAX_PROMPT_CHARS + 1:,} characters, more than the {MAX_PROMPT_CHARS:,} a prompt may have"),
]
