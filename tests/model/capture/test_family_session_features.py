"""Session features on a tiny Llama-style (rotary, RMSNorm, SwiGLU, grouped-query heads) and a
tiny NeoX-style (partial rotary, parallel block) model loaded from Hugging Face folders: mean
ablation, the logit lens, the head scan and greedy generation agree with the reference model
run by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.families import load_folder, session_on
from tests.helpers.hf_family_models import FAMILIES, build, save, vocab
from tests.helpers.tolerances import assert_float32_close, model_reduction
from transformer_viewer.model.analysis.generate import generate
from transformer_viewer.model.analysis.lens import logit_lens
from transformer_viewer.model.analysis.scan import head_scan

T = 16


@pytest.fixture(scope="module", params=["smollm_tied", "pythia"])
def pair(request, tmp_path_factory):
    hf = build(request.param, seed=3)
    loaded = load_folder(save(hf, str(tmp_path_factory.mktemp(request.param))))
    ids = torch.randint(3, vocab(hf), (1, T), generator=torch.Generator().manual_seed(4))
    return request.param, hf, loaded, ids


def hf_logits_with(hf, name, layer, edit):
    """HF logits (T, V) with `edit(x)` applied to the input of layer `layer`'s output projection."""
    o_proj = hf.get_submodule(FAMILIES[name][3].format(layer))
    handle = o_proj.register_forward_pre_hook(lambda _m, args: (edit(args[0].clone()),))
    try:
        with torch.no_grad():
            return hf(torch.as_tensor(hf._ids)).logits[0]
    finally:
        handle.remove()


def test_mean_ablation_matches_the_reference(pair):
    name, hf, loaded, ids = pair
    c, layer, head = loaded.config, 1, 2
    hs = c.head_size

    def mean_head(x):  # (B, T, nh * hs): the head's output replaced by its mean over positions
        x[..., head * hs:(head + 1) * hs] = x[..., head * hs:(head + 1) * hs].mean(dim=1, keepdim=True)
        return x

    hf._ids = ids
    ref = hf_logits_with(hf, name, layer, mean_head)
    mask = np.zeros((c.n_layer, c.n_head), dtype=bool)
    mask[layer, head] = True
    trace = session_on(loaded, ids).run(mask, ablation="mean")
    assert_float32_close(trace.next.probs, torch.softmax(ref[-1], -1), reduction=model_reduction(c),
                         depth=c.n_layer + 1, scale=1.0, what=f"{name} mean-ablated next token")


def test_logit_lens_final_row_is_the_models_prediction(pair):
    name, hf, loaded, ids = pair
    s = session_on(loaded, ids)
    s.run()
    lens = logit_lens(s)
    with torch.no_grad():
        out = hf(ids, output_hidden_states=True)
    np.testing.assert_array_equal(lens.final_ids, out.logits[0].argmax(-1).numpy())
    c = loaded.config
    assert lens.top_ids.shape == (c.n_layer + 1, T)
    # An early row reads the residual stream through the final norm and head, as HF's own modules would.
    with torch.no_grad():
        norm = hf.get_submodule("gpt_neox.final_layer_norm" if name == "pythia" else "model.norm")
        head = hf.get_submodule("embed_out" if name == "pythia" and hasattr(hf, "embed_out") else "lm_head")
        early = head(norm(out.hidden_states[1][0])).argmax(-1).numpy()
    np.testing.assert_array_equal(lens.top_ids[1], early)


def test_head_scan_effects_match_ablating_in_the_reference(pair):
    name, hf, loaded, ids = pair
    c = loaded.config
    s = session_on(loaded, ids)
    s.run()
    result = head_scan(s)
    assert result.done.all() and not result.cancelled
    target = result.target_id
    hf._ids = ids
    for layer, head in [(0, 0), (c.n_layer - 1, c.n_head - 1)]:
        def zero(x, head=head):
            x[..., head * c.head_size:(head + 1) * c.head_size] = 0.0
            return x
        ref = torch.log_softmax(hf_logits_with(hf, name, layer, zero)[-1], -1)[target]
        assert abs(float(result.metric_values[layer, head]) - float(ref)) <= 1e-4
    calls = []
    cancelled = head_scan(s, is_cancelled=lambda: calls.append(1) or len(calls) > 3)
    assert cancelled.cancelled and not cancelled.done.all()


def test_greedy_generation_follows_the_reference(pair):
    name, hf, loaded, ids = pair
    s = session_on(loaded, ids[:, :8])
    gen = generate(s, 5)
    seq = ids[:, :8]
    expected = []
    with torch.no_grad():
        for _ in range(5):
            nxt = int(hf(seq).logits[0, -1].argmax())
            expected.append(nxt)
            seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
    assert gen.new_ids.tolist() == expected
