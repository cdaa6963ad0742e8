"""`SparseAutoencoder.top_features`, the per-token top features without the dense activations,
equals the top of `encode` for every architecture, normalisation and TopK's rescaling."""

import pytest
import torch

from tests.helpers.models import TINY
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_float32_close
from transformer_viewer.model.sae.loading import load_sae

D_SAE = 48


@pytest.mark.parametrize("arch, fields", [
    ("standard", {}), ("standard", {"normalize_activations": "layer_norm"}), ("jumprelu", {}), ("gated", {}),
    ("topk", {}), ("topk", {"rescale_acts_by_decoder_norm": True}),
    ("topk", {"normalize_activations": "constant_norm_rescale", "apply_b_dec_to_input": False}),
])
@pytest.mark.parametrize("top", [5, 12])
def test_top_features_equal_the_top_of_encode(tmp_path, arch, fields, top):
    cfg = saelens_cfg(arch, TINY.n_embd, D_SAE, "blocks.1.hook_resid_post", k=8 if arch == "topk" else None, **fields)
    sae = load_sae(write_saelens(tmp_path / "sae", cfg, random_weights(arch, TINY.n_embd, D_SAE)), TINY).module
    x = torch.randn(3, 17, TINY.n_embd, generator=torch.Generator().manual_seed(1)) * 2.0
    with torch.no_grad():
        dense = sae.encode(x)  # (3, 17, d_sae)
        values, ids = sae.top_features(x, top)
    expected = torch.topk(dense, top, dim=-1).values
    assert values.shape == ids.shape == (3, 17, top)
    # The same arithmetic up to where the bias is added: float32 sums of n_embd products.
    assert_float32_close(values, expected, reduction=TINY.n_embd, what="top features")
    firing = values > 0
    assert torch.equal(torch.gather(dense, -1, ids)[firing] > 0, torch.ones(int(firing.sum()), dtype=torch.bool))
    assert (values[..., :-1] >= values[..., 1:]).all()  # highest first
    if arch == "topk" and top > 8:
        assert (values[..., 8:] == 0).all()  # a TopK SAE has at most k nonzero features
