"""`SparseAutoencoder.decode_difference` multiplies only the features that differ: it equals
decode(a_new) - decode(a_old), and is exactly zero in the rows where the two agree."""

import pytest
import torch

from tests.helpers.models import TINY
from tests.helpers.saes import random_weights, saelens_cfg, write_saelens
from tests.helpers.tolerances import assert_float32_close
from transformer_viewer.model.sae.loading import load_sae

D_SAE = 48


@pytest.mark.parametrize("fields", [{}, {"rescale_acts_by_decoder_norm": True}])
@pytest.mark.parametrize("features", [[], [5], [3, 17, 40]])
def test_difference_of_the_changed_features(tmp_path, fields, features):
    cfg = saelens_cfg("topk", TINY.n_embd, D_SAE, "blocks.1.hook_resid_post", k=8, **fields)
    sae = load_sae(write_saelens(tmp_path / "sae", cfg, random_weights("topk", TINY.n_embd, D_SAE)), TINY).module
    x = torch.randn(2, 9, TINY.n_embd, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a = sae.encode(x)  # (2, 9, d_sae)
        changed = a.clone()
        for i, f in enumerate(features):
            changed[:, 2 + i, f] = 4.0 + i  # one position per feature; the others stay as they were
        delta = sae.decode_difference(changed, a)
        expected = sae.decode(changed) - sae.decode(a)
    assert delta.shape == x.shape
    # Sums of d_sae products of the reconstruction's size, subtracted.
    assert_float32_close(delta, expected, reduction=D_SAE, scale=float(sae.decode(a).abs().max()), what="difference")
    untouched = [p for p in range(9) if not 2 <= p < 2 + len(features)]
    assert torch.equal(delta[:, untouched], torch.zeros_like(delta[:, untouched]))
