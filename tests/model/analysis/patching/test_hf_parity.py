"""Exact patching against the same experiment written with `transformers` forward hooks on a
random model saved with save_pretrained and opened by our loader: GPT-2, and a Llama-style model
with grouped-query heads (4 query heads sharing 2 key/value heads)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.helpers.families import load_folder, session_on
from tests.helpers.hf_family_models import build, save
from tests.helpers.models import hf_config, hf_model
from tests.helpers.patch_references import metric_atol
from transformer_viewer.model.analysis.patching.exact import layout, patch_grid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint

T = 9
CHANGED = (2, 6)  # positions whose tokens the corrupted prompt changes


def _modules(family: str, layer: int) -> dict:
    """HF module paths per site: (path, "pre" for its input or "out" for its output)."""
    if family == "gpt2":
        h = f"transformer.h.{layer}"
        return {"resid_pre": (h, "pre"), "attn_out": (f"{h}.attn", "out"), "mlp_out": (f"{h}.mlp", "out"),
                "z": (f"{h}.attn.c_proj", "pre"), "qkv": (f"{h}.attn.c_attn", "out")}
    h = f"model.layers.{layer}"
    return {"resid_pre": (h, "pre"), "attn_out": (f"{h}.self_attn", "out"), "mlp_out": (f"{h}.mlp", "out"),
            "z": (f"{h}.self_attn.o_proj", "pre"), "q": (f"{h}.self_attn.q_proj", "out"),
            "k": (f"{h}.self_attn.k_proj", "out"), "v": (f"{h}.self_attn.v_proj", "out")}


def _columns(config, family: str, site: str, head):
    """The slice of the last dimension a patch of `site`'s `head` covers in the HF tensor."""
    hs, nh, nkv = config.head_size, config.n_head, config.kv_heads
    if head is None:
        return slice(None)
    if family == "gpt2" and site in ("q", "k", "v"):
        base = {"q": 0, "k": nh * hs, "v": (nh + nkv) * hs}[site]  # c_attn's output is q, k, v stacked
        return slice(base + head * hs, base + (head + 1) * hs)
    return slice(head * hs, (head + 1) * hs)


def _hf_patched_logits(hf, family, config, target_ids, source_ids, patch) -> torch.Tensor:
    """The HF model's last-position logits on `target_ids` with `patch` copied from `source_ids`'s run."""
    site = "qkv" if family == "gpt2" and patch.site in ("q", "k", "v") else patch.site
    path, where = _modules(family, patch.layer)[site]
    module = hf.get_submodule(path)
    cols = _columns(config, family, patch.site, patch.head)
    rows = slice(None) if patch.positions is None else list(patch.positions)
    kept = {}

    def first(value):
        return value[0] if isinstance(value, tuple) else value

    def with_first(value, new):
        return (new, *value[1:]) if isinstance(value, tuple) else new

    def record_pre(_m, args, kwargs):
        kept["x"] = (args[0] if args else kwargs["hidden_states"]).clone()

    def record_out(_m, _args, out):
        kept["x"] = first(out).clone()

    def replace(x):
        x = x.clone()
        x[:, rows, cols] = kept["x"][:, rows, cols]
        return x

    def patch_pre(_m, args, kwargs):
        if args:
            return (replace(args[0]), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": replace(kwargs["hidden_states"])}

    def patch_out(_m, _args, out):
        return with_first(out, replace(first(out)))

    with torch.no_grad():
        for ids, hook in ((source_ids, record_pre if where == "pre" else record_out),
                          (target_ids, patch_pre if where == "pre" else patch_out)):
            handle = (module.register_forward_pre_hook(hook, with_kwargs=True) if where == "pre"
                      else module.register_forward_hook(hook))
            try:
                logits = hf(ids).logits[0, -1]
            finally:
                handle.remove()
    return logits


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model_pair(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "gpt2":
        hf = hf_model(hf_config(n_layer=2, n_head=4, n_embd=32, vocab_size=96), seed=5)
        hf.save_pretrained(str(folder))
        loaded = load_checkpoint(str(folder))
    else:
        hf = build("llama", seed=5)  # 4 query heads, 2 key/value heads
        loaded = load_folder(save(hf, str(folder)))
    ids = torch.randint(3, 96, (1, T), generator=torch.Generator().manual_seed(6))
    corrupted = ids.clone()
    corrupted[0, list(CHANGED)] = (corrupted[0, list(CHANGED)] + 17) % 96
    s = session_on(loaded, ids)
    s.set_corrupted_tokens(dataclasses.replace(s.tokens, ids=tuple(int(i) for i in corrupted[0])))
    return request.param, hf, s, ids, corrupted


@pytest.mark.parametrize("what", ["resid", "attn", "mlp", "heads", "heads-by-pos", "q", "k", "v"])
def test_patching_equals_transformers_hooks(model_pair, what):
    family, hf, s, clean_ids, corrupted_ids = model_pair
    if family == "llama":
        assert s.config.kv_heads < s.config.n_head  # grouped-query heads
    with torch.no_grad():
        clean_logits = hf(clean_ids).logits
    top = clean_logits[0, -1].topk(2).indices
    atol = metric_atol(s, float(clean_logits.abs().max()))
    metric = PatchMetric.make("logit-diff", (int(top[0]), int(top[1])))
    for direction in ("denoise", "noise"):
        grid = patch_grid(s, what, metric, direction, layer=1)
        source = "clean" if direction == "denoise" else "corrupted"
        target_ids, source_ids = (corrupted_ids, clean_ids) if source == "clean" else (clean_ids, corrupted_ids)
        cells = layout(s.config, what, source, T, range(T), layer=1).cell_patches
        for cell, (patch,) in cells.items():
            if patch.site == "resid_pre" and patch.layer == s.config.n_layer:
                continue  # the final residual stream has no module input in HF; the hand-written tests cover it
            logits = _hf_patched_logits(hf, family, s.config, target_ids, source_ids, patch)
            expected = float(logits[metric.tokens[0]] - logits[metric.tokens[1]])
            assert abs(grid.raw[cell] - expected) <= atol, (family, what, direction, cell, grid.raw[cell], expected)
        if what in ("resid", "heads"):  # a random model's MLPs may barely move this metric; these do
            unpatched = grid.corrupted if source == "clean" else grid.clean
            assert abs(grid.raw - unpatched).max() > 100 * atol  # not the unpatched run compared with itself
