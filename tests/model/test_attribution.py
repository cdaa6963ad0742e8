"""Direct logit attribution: the heads' direct effects and every other writer's add up to the
model's logit, read through the same frozen final LayerNorm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.models import tiny_session
from transformer_viewer.model.attribution import head_attribution
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.hooks import caching, count_hooks


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
    total = float(a.direct.astype(np.float64).sum()) + others + float(ln.bias @ u)
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
