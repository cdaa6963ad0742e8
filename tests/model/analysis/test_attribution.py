"""Direct logit attribution: the heads' direct effects and every other writer's add up to the
model's logit, read through the same frozen final norm, in every family's layout of norms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_session
from transformer_viewer.model.analysis.attribution import head_attribution
from transformer_viewer.model.decoder.hooks import caching, count_hooks, hooks
from transformer_viewer.model.errors import ModelError


@torch.no_grad()
def _term(v: torch.Tensor, gain, readout_row, sigma) -> float:
    return float(((v - v.mean()) * gain / sigma) @ readout_row)


@pytest.mark.parametrize("position, token", [(None, None), (3, 11)])
def test_the_direct_effects_and_the_other_writers_sum_to_the_logit(position, token):
    s = tiny_session()
    a = head_attribution(s, position=position, token=token)
    model, L = s.model, s.config.n_layer
    p = a.position
    ids = torch.tensor([s.tokens.ids])
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_mlp_out" for layer in range(L)]
    with torch.no_grad(), caching(model, names) as acts:
        final = model.run_blocks(model.embed(ids))[0, p]
        logits = model.unembed(final)
    assert a.logit == pytest.approx(float(logits[a.token_id]), rel=1e-5)
    if token is None:
        assert a.token_id == int(torch.argmax(logits[: s.n_vocab]))
    ln, u = model.ln_f, model.lm_head.weight[a.token_id]
    sigma = torch.sqrt(final.var(unbiased=False) + ln.eps)
    others = _term(acts["blocks.0.hook_resid_pre"][0, p], ln.weight, u, sigma)  # the embedding
    for layer in range(L):
        others += _term(model.blocks[layer].attn.c_proj.bias, ln.weight, u, sigma)
        others += _term(acts[f"blocks.{layer}.hook_mlp_out"][0, p], ln.weight, u, sigma)
    total = float(a.direct.astype(np.float64).sum()) + others + float((ln.bias @ u).detach())
    assert total == pytest.approx(a.logit, rel=1e-4, abs=1e-3)
    assert np.abs(a.direct).max() > 1e-3  # the heads do write something this test could miss
    assert count_hooks(model) == 0


def test_an_ablated_head_has_no_direct_effect_and_errors_are_one_line():
    s = tiny_session()
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, 2] = True
    a = head_attribution(s, mask=mask)
    assert a.direct[1, 2] == 0.0 and a.mask[1, 2]
    assert np.count_nonzero(a.direct) == a.direct.size - 1
    with pytest.raises(ModelError, match="position 99 is outside the prompt's"):
        head_attribution(s, position=99)
    with pytest.raises(ModelError, match="token id 60000 is outside the vocabulary"):
        head_attribution(s, token=60000)


FAMILY_CASES = ["llama", "gemma2", "gemma3", "olmo", "olmo2", "pythia", "qwen3", "phi3"]


@pytest.fixture(scope="module")
def family_sessions(tmp_path_factory):
    from tests.helpers.families import load_folder, session_on
    from tests.helpers.hf_family_models import build, save

    out = {}
    for name in FAMILY_CASES:
        hf = build(name, seed=7)
        ids = torch.randint(3, hf.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(8))
        out[name] = session_on(load_folder(save(hf, str(tmp_path_factory.mktemp(name)))), ids)
    return out


@pytest.mark.parametrize("name", FAMILY_CASES)
@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_every_familys_heads_and_other_writers_sum_to_its_logit(family_sessions, name, ablation):
    """Per layer, the heads' writes (through a norm on the attention's output, where the family
    has one) and the output projection's bias make the attention's real output; all writers read
    through the final norm (LayerNorm, RMSNorm, Gemma's 1 + w) make the logit before any cap."""
    from transformer_viewer.model.analysis.attribution import frozen_norm, head_writes
    from transformer_viewer.model.capture.interventions import head_mask_hooks

    s = family_sessions[name]
    model, c = s.model, s.config
    mask = np.zeros((c.n_layer, c.n_head), dtype=bool)
    mask[1, 0] = True
    p = 7
    a = head_attribution(s, position=p, mask=mask, ablation=ablation)
    ids = torch.tensor([s.tokens.ids])
    L = c.n_layer
    names = [f"blocks.{layer}.hook_resid_pre" for layer in range(L)]
    names += [f"blocks.{layer}.{w}" for layer in range(L) for w in ("hook_attn_out", "hook_mlp_out")]
    with torch.no_grad(), hooks(model, head_mask_hooks(mask, ablation)), caching(model, names) as acts:
        final = model.run_blocks(model.embed(ids))[0, p]
        raw = model.lm_head(model.ln_f(final)).float()
    assert a.logit == pytest.approx(float(raw[a.token_id]), rel=1e-5, abs=1e-5)
    assert a.logit_cap == (c.logit_softcap or 0.0)
    readout = model.lm_head.weight[a.token_id].float()
    final_norm = frozen_norm(model.ln_f, final)
    with torch.no_grad():
        total = float(final_norm.linear(acts["blocks.0.hook_resid_pre"][0, p]) @ readout)
        for layer in range(L):
            block = model.blocks[layer]
            writes = head_writes(block, acts[f"blocks.{layer}.hook_resid_pre"], p, mask[layer], ablation)
            attn_out = acts[f"blocks.{layer}.hook_attn_out"][0, p].float()
            bias = block.attn.c_proj.bias
            rest = attn_out - writes.sum(dim=0)  # what the bias wrote: nothing where there is none
            if bias is None:
                np.testing.assert_allclose(rest.numpy(), 0.0, atol=1e-5 * float(attn_out.abs().max()) + 1e-6)
            total += float(final_norm.linear(rest) @ readout)
            total += float(final_norm.linear(acts[f"blocks.{layer}.hook_mlp_out"][0, p]) @ readout)
        if final_norm.bias is not None:
            total += float(final_norm.bias @ readout)
    total += float(a.direct.astype(np.float64).sum())
    assert total == pytest.approx(a.logit, rel=1e-4, abs=1e-4)
    assert a.direct[1, 0] == 0.0 if ablation == "zero" else a.direct[1, 0] != 0.0
    assert np.abs(a.direct).max() > 1e-4 and count_hooks(model) == 0


def test_a_model_without_a_final_norm_reads_its_writes_as_they_are():
    """logit = u . (embedding + every attention output + every MLP output), and each attention
    output is its heads' writes plus the output projection's bias."""
    s = tiny_session()
    s.model.ln_f = torch.nn.Identity()  # a model edited in code: no final norm
    a = head_attribution(s, position=4)
    ids = torch.tensor([s.tokens.ids])
    L = s.config.n_layer
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_mlp_out" for layer in range(L)]
    with torch.no_grad(), caching(s.model, names) as acts:
        s.model.run_blocks(s.model.embed(ids))
        u = s.model.lm_head.weight[a.token_id]
        others = sum(float(acts[n][0, 4] @ u) for n in names)
        others += sum(float(s.model.blocks[layer].attn.c_proj.bias @ u) for layer in range(L))
    assert float(a.direct.astype(np.float64).sum()) + others == pytest.approx(a.logit, rel=1e-4, abs=1e-4)
