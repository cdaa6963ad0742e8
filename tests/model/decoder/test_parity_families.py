"""Parity with Hugging Face's implementation of every supported decoder family: a random tiny
model built with `transformers`, saved with save_pretrained and read by our loader, gives the
same logits, attention patterns (eager `output_attentions`), residual stream, head-ablation
effects and incremental recomputes. Tolerances follow from float32 arithmetic
(tests/helpers/tolerances.py), so they hold on any CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.families import load_folder, session_on
from tests.helpers.hf_family_models import FAMILIES, build, published_form, save, text_params, vocab
from tests.helpers.tolerances import assert_float32_close, float32_atol, model_reduction

T = 20  # longer than every sliding window in the tiny configs


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def pair(request, tmp_path_factory):
    hf = build(request.param)
    folder = save(hf, str(tmp_path_factory.mktemp(request.param)))
    ids = torch.randint(3, vocab(hf), (1, T), generator=torch.Generator().manual_seed(1))
    return request.param, hf, load_folder(folder), ids, folder


def test_logits_patterns_and_residual_stream(pair):
    name, hf, loaded, ids, _ = pair
    c = loaded.config
    with torch.no_grad():
        out = hf(ids, output_attentions=True, output_hidden_states=True)
        ours = loaded.model(ids)[0]
    K, L = model_reduction(c), c.n_layer
    assert loaded.n_params == text_params(hf)
    assert (ours - out.logits).abs().max().item() <= 1e-4
    assert_float32_close(ours, out.logits, reduction=K, depth=L + 1, what=f"{name} logits")
    s = session_on(loaded, ids)
    trace = s.run()
    for layer in range(L):
        hf_pattern = out.attentions[layer][0].numpy()  # (nh, T, T)
        assert np.abs(trace.attention[layer] - hf_pattern).max() <= 1e-5, layer
    resid = s.residuals()
    for layer in range(L):  # HF's hidden_states[l] is the input of layer l
        assert_float32_close(resid[layer][0], out.hidden_states[layer][0], reduction=K, depth=layer + 1,
                             what=f"{name} layer {layer} residual stream")
    hf_probs = torch.softmax(out.logits[0, -1], -1)
    assert_float32_close(trace.next.probs, hf_probs, reduction=K, depth=L + 1, scale=1.0, what="next token")


def test_sliding_windows_hide_old_keys(pair):
    name, hf, loaded, ids, _ = pair
    c = loaded.config
    if not c.sliding_window:
        pytest.skip("no sliding window in this family's tiny config")
    trace = session_on(loaded, ids).run()
    sliding = [layer for layer in range(c.n_layer) if c.layer_is_sliding(layer)]
    assert sliding and c.sliding_window < T
    for layer in sliding:
        old = np.tril(np.ones((T, T), dtype=bool), -c.sliding_window)  # keys window or more back
        assert np.all(trace.attention[layer][:, old] == 0)


def _zero_heads(heads: list[int], hs: int):
    def pre_hook(_module, args):
        x = args[0].clone()  # (B, T, nh * hs)
        for h in heads:
            x[..., h * hs:(h + 1) * hs] = 0.0
        return (x,)
    return pre_hook


def test_head_ablation_matches_a_pre_hook_on_the_output_projection(pair):
    name, hf, loaded, ids, _ = pair
    c = loaded.config
    layer, head = c.n_layer - 2, 1
    o_proj = hf.get_submodule(FAMILIES[name][3].format(layer))
    handle = o_proj.register_forward_pre_hook(_zero_heads([head], c.head_size))
    try:
        with torch.no_grad():
            hf_logits = hf(ids).logits[0]  # (T, V)
    finally:
        handle.remove()
    mask = np.zeros((c.n_layer, c.n_head), dtype=bool)
    mask[layer, head] = True
    s = session_on(loaded, ids)
    clean = s.run()
    ablated = s.run(mask)
    assert ablated.first_layer_run == layer  # incremental: the layers before were reused
    K = model_reduction(c)
    hf_lp = torch.log_softmax(hf_logits, -1)[torch.arange(T - 1), ids[0, 1:]]
    assert_float32_close(ablated.token_logprobs[1:], hf_lp, reduction=K, depth=c.n_layer + 1,
                         scale=2 * float(hf_logits.abs().max()), what=f"{name} ablated log-probs")
    # The ablation did something, far beyond rounding.
    assert np.abs(clean.token_logprobs[1:] - ablated.token_logprobs[1:]).max() > 100 * float32_atol(K, c.n_layer + 1)
    # Incremental recompute equals a full recompute under the same mask.
    full = session_on(loaded, ids).run(mask)
    assert full.first_layer_run == 0
    np.testing.assert_array_equal(ablated.attention, full.attention)
    np.testing.assert_array_equal(ablated.next.probs, full.next.probs)
    mean = s.run(mask, ablation="mean")
    assert mean.first_layer_run == layer and np.isfinite(mean.token_logprobs[1:]).all()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_published_config_form_loads_the_same_model(name, tmp_path):
    hf = build(name)
    folder = save(hf, str(tmp_path / name))
    native = load_folder(folder).config
    published_form(folder)
    loaded = load_folder(folder)
    assert loaded.config == native
    ids = torch.randint(3, vocab(hf), (1, T), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (loaded.model(ids)[0] - hf(ids).logits).abs().max().item() <= 1e-4


def test_family_and_switches_are_recorded(pair):
    name, _, loaded, _, _ = pair
    family = loaded.training["family"]
    expected = {"llama": "Llama", "smollm_tied": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
                "phi3": "Phi-3", "phi3_longrope": "Phi-3", "olmo": "OLMo", "olmo2": "OLMo 2", "olmo3": "OLMo 3", "smollm3": "SmolLM3", "gemma": "Gemma", "gemma2": "Gemma 2",
                "gemma3": "Gemma 3", "gemma3_multimodal": "Gemma 3 text decoder", "qwen2_vl": "Qwen2-VL text decoder",
                "qwen2_5_vl": "Qwen2.5-VL text decoder", "qwen3_vl": "Qwen3-VL text decoder", "ministral3": "Ministral 3",
                "mistral3": "Mistral 3 text decoder", "mistral3_small": "Mistral 3 text decoder", "phi": "Phi", "pythia": "GPT-NeoX", "neox_sequential": "GPT-NeoX", "gptj": "GPT-J"}
    assert family == expected[name]
