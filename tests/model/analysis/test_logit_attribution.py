"""Complete direct logit attribution: the terms of every writer add up to the model's logit (or
logit difference) on every family, masked or not; the heads' terms equal a recomputation written
here from the weights and the cached activations; a head's split by source position adds up to
its term."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.families import README_FAMILIES, family_session
from tests.helpers.models import tiny_session
from tests.helpers.tolerances import assert_float32_close, model_reduction
from transformer_viewer.model.analysis.logit_attribution import COMPONENTS, head_sources, logit_attribution
from transformer_viewer.model.capture.interventions import head_mask_hooks
from transformer_viewer.model.decoder.hooks import caching, count_hooks, hooks
from transformer_viewer.model.errors import ModelError


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    return {name: family_session(name, tmp_path_factory.mktemp(name)) for name in README_FAMILIES}


def assert_terms_add_up(a, config):
    values = np.array([t["value"] for t in a.terms()], dtype=np.float64)
    # Each term is rounded on its own; the rounding of the whole is relative to the terms' sizes.
    assert_float32_close(values.sum(), a.logit, reduction=model_reduction(config), depth=config.n_layer + 1,
                         scale=max(1.0, float(np.abs(values).sum())), what="the sum of the terms")


def _mask(config) -> np.ndarray:
    mask = np.zeros((config.n_layer, config.n_head), dtype=bool)
    mask[min(1, config.n_layer - 1), 0] = True
    return mask


@pytest.mark.parametrize("name", README_FAMILIES + ("gpt2",))
@pytest.mark.parametrize("masked", [False, True], ids=["clean", "masked"])
def test_the_terms_add_up_to_the_logit_on_every_family(sessions, name, masked):
    s = tiny_session() if name == "gpt2" else sessions[name]
    c = s.config
    mask = _mask(c) if masked else None
    for tokens in (None, (5, 9)):
        a = logit_attribution(s, position=7, tokens=tokens, mask=mask)
        assert_terms_add_up(a, c)
        assert {t["component"] for t in a.terms()} <= set(COMPONENTS)
        assert (a.position_term is not None) == (c.positional in ("learned", "sinusoidal"))
        if masked:
            assert a.heads[min(1, c.n_layer - 1), 0] == 0.0
    assert count_hooks(s.model) == 0


def test_the_logit_is_the_models_own_before_the_soft_cap(sessions):
    s = sessions["gemma2"]
    a = logit_attribution(s, position=5, tokens=(3, 4))
    ids = torch.tensor([s.tokens.ids])
    with torch.no_grad():
        final = s.model.run_blocks(s.model.embed(ids))[0, 5]
        raw = s.model.lm_head(s.model.ln_f(final)).float()
    assert a.logit_cap == s.config.logit_softcap > 0
    assert a.logit == pytest.approx(float(raw[3] - raw[4]), rel=1e-5, abs=1e-5)


@torch.no_grad()
def _independent_head_terms(s, p, tokens, mask) -> np.ndarray:
    """Each head's write z_h W_O,h at p from a hooked forward, read through the final norm with
    its scale frozen at p, written out from the definitions (LayerNorm or RMSNorm)."""
    model, c = s.model, s.config
    ids = torch.tensor([s.tokens.ids])
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(c.n_layer)]
    with torch.no_grad(), hooks(model, head_mask_hooks(mask, "zero")), caching(model, names) as acts:
        final = model.run_blocks(model.embed(ids))[0, p].double()
    ln = model.ln_f
    if isinstance(ln, torch.nn.LayerNorm):
        sigma = torch.sqrt(final.var(unbiased=False) + ln.eps)
        through = lambda w: (w - w.mean(-1, keepdim=True)) * ln.weight.double() / sigma  # noqa: E731
    else:  # Llama's RMSNorm: x * w / rms(x)
        rms = torch.sqrt(final.pow(2).mean() + ln.eps)
        through = lambda w: w * ln.weight.double() / rms  # noqa: E731
    u = model.lm_head.weight.double()
    readout = u[tokens[0]] - u[tokens[1]]
    out = np.empty((c.n_layer, c.n_head))
    hs = c.head_size
    for layer in range(c.n_layer):
        z = acts[names[layer]][0, p].double()  # (nh, hs)
        w_o = model.blocks[layer].attn.c_proj.weight.double()  # (C, nh * hs)
        for h in range(c.n_head):
            write = w_o[:, h * hs:(h + 1) * hs] @ z[h]  # (C,)
            out[layer, h] = float(through(write) @ readout)
    return out


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_the_head_terms_equal_an_independent_recomputation(sessions, name):
    """GPT-2 and a grouped-query Llama (4 query heads on 2 key/value heads)."""
    s = tiny_session() if name == "gpt2" else sessions[name]
    c = s.config
    assert name == "gpt2" or c.kv_heads < c.n_head
    mask = _mask(c)
    a = logit_attribution(s, position=6, tokens=(7, 2), mask=mask)
    expected = _independent_head_terms(s, 6, (7, 2), mask)
    assert_float32_close(a.heads, expected, reduction=model_reduction(c), depth=c.n_layer + 1,
                         scale=max(1.0, float(np.abs(expected).max())), what="per-head terms")
    assert np.abs(expected).max() > 1e-3


@pytest.mark.parametrize("name", ["gpt2", "llama", "gemma2", "olmo2", "pythia"])
@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_a_heads_sources_add_up_to_its_term(sessions, name, ablation):
    s = tiny_session() if name == "gpt2" else sessions[name]
    c = s.config
    mask = _mask(c)
    a = logit_attribution(s, position=8, tokens=(4,), mask=mask, ablation=ablation)
    for layer, head in [(0, 1), (min(1, c.n_layer - 1), 0), (c.n_layer - 1, c.n_head - 1)]:
        parts = head_sources(s, layer, head, position=8, tokens=(4,), mask=mask, ablation=ablation)
        masked = mask[layer, head]
        assert parts.shape == ((len(s.tokens.ids),) if masked and ablation == "mean" else (9,))
        assert float(parts.astype(np.float64).sum()) == pytest.approx(float(a.heads[layer, head]), rel=1e-4, abs=1e-5)
        if masked and ablation == "zero":
            assert not parts.any()


def test_bad_requests_are_one_line():
    s = tiny_session()
    with pytest.raises(ModelError, match="position 99 is outside the prompt's"):
        logit_attribution(s, position=99)
    with pytest.raises(ModelError, match="token id 60000 is outside the vocabulary"):
        logit_attribution(s, tokens=(60000,))
    with pytest.raises(ModelError, match="one token or a pair"):
        logit_attribution(s, tokens=(1, 2, 3))
    with pytest.raises(ModelError, match="head 7.0 is not in this model"):
        head_sources(s, 7, 0)


def test_top_contributors_are_sorted_with_shares():
    a = logit_attribution(tiny_session())
    top = a.top(5)
    assert [abs(t["value"]) for t in top] == sorted((abs(t["value"]) for t in top), reverse=True)
    assert all(0 <= t["share"] <= 1 for t in top) and len(top) == 5
