"""The SAE trainer's pieces: folding the activation scale into the weights, TopK, the auxiliary
loss, and the FVU/L0/dead measures."""

import math

import pytest
import torch

from tests.helpers.sae_files import decode, encode
from tests.helpers.tolerances import assert_float32_close
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.training.sae_train import (
    SaeTrainConfig,
    TrainingSae,
    measure,
    topk_aux_loss,
    train_sae,
)


def random_sae(architecture="topk", d_in=24, d_sae=96, k=6, seed=0) -> TrainingSae:
    gen = torch.Generator().manual_seed(seed)
    sae = TrainingSae(d_in, SaeTrainConfig(d_sae=d_sae, architecture=architecture, k=k), gen)
    with torch.no_grad():
        sae.b_enc.normal_(0, 0.3, generator=gen)
        sae.b_dec.normal_(0, 0.5, generator=gen)
        sae.W_enc.mul_(1 + torch.rand(sae.W_enc.shape, generator=gen))
    return sae


@pytest.mark.parametrize("architecture", ["topk", "standard"])
def test_folded_weights_read_raw_activations(architecture):
    """Trained on x * scale, saved for x: the same features, the reconstruction divided back."""
    sae, scale = random_sae(architecture), 3.7
    x = torch.randn(200, 24, generator=torch.Generator().manual_seed(1)) * 2.0
    cfg = {"architecture": architecture, "k": 6, "apply_b_dec_to_input": True}
    folded = sae.folded(scale)
    with torch.no_grad():
        f_scaled = sae.encode(x * scale)
        f_raw = encode(cfg, folded, x)
        # Sums of d_in products of magnitude up to |x| * scale * |W_enc|.
        assert_float32_close(f_raw, f_scaled, reduction=24, scale=float(f_scaled.abs().max()), what="features")
        assert torch.equal(f_raw != 0, f_scaled != 0)
        assert_float32_close(decode(folded, f_scaled), sae.decode(f_scaled) / scale, reduction=96,
                             what="reconstruction")


def test_topk_keeps_k_features_at_most():
    sae = random_sae(k=6)
    with torch.no_grad():
        pre = sae.pre_activations(torch.randn(50, 24))
        f = sae.activate(pre)
    assert int((f != 0).sum(-1).max()) <= 6
    kept = pre.topk(6, dim=-1).values.relu()
    assert torch.equal(f.sort(dim=-1, descending=True).values[:, :6], kept)


def test_aux_loss_only_with_dead_features():
    sae = random_sae()
    x = torch.randn(40, 24)
    pre = sae.pre_activations(x)
    recon = sae.decode(sae.activate(pre))
    assert float(topk_aux_loss(sae, x, recon, pre, torch.zeros(96, dtype=torch.bool))) == 0.0
    dead = torch.zeros(96, dtype=torch.bool)
    dead[:5] = True
    loss = topk_aux_loss(sae, x, recon, pre, dead)
    loss.backward()
    assert float(loss.detach()) > 0 and sae.W_dec.grad[5:].abs().sum() == 0 and sae.W_dec.grad[:5].abs().sum() > 0


def test_measure():
    x = torch.randn(300, 8, generator=torch.Generator().manual_seed(2))
    perfect = measure(lambda a: torch.cat([a, torch.zeros(len(a), 4)], 1), lambda f: f[:, :8], [x[:100], x[100:]], 12)
    assert perfect.fvu == pytest.approx(0.0, abs=1e-12) and perfect.tokens == 300 and perfect.dead == 4
    mean = x.mean(0)
    by_mean = measure(lambda a: torch.zeros(len(a), 3), lambda f: mean.expand(len(f), 8), [x], 3)
    assert by_mean.fvu == pytest.approx(1.0, rel=1e-6) and by_mean.l0 == 0.0 and by_mean.dead == 3


def test_training_lowers_the_error_on_structured_data():
    """Sparse combinations of a few directions: the SAE's FVU falls well below the mean's 1."""
    gen = torch.Generator().manual_seed(4)
    dictionary = torch.randn(32, 16, generator=gen)

    def chunks():
        while True:
            codes = torch.rand(512, 32, generator=gen) * (torch.rand(512, 32, generator=gen) < 0.1)
            yield codes @ dictionary  # (512, 16)

    held_out = [next(chunks())]
    cfg = SaeTrainConfig(d_sae=64, k=4, steps=150, batch_tokens=256, lr=3e-3, warmup=10)
    weights, record = train_sae(chunks(), 16, cfg, held_out, eval_every=50)
    fvus = [h["val_fvu"] for h in record["history"]]
    assert fvus[-1] < fvus[0] and record["final_fvu"] < 0.5 and math.isfinite(record["activation_scale"])
    assert {n: tuple(t.shape) for n, t in weights.items()} == {"W_enc": (16, 64), "b_enc": (64,),
                                                              "W_dec": (64, 16), "b_dec": (16,)}


@pytest.mark.parametrize("change, message", [
    ({"architecture": "gated"}, "--architecture must be one of"),
    ({"k": 0}, "--k must be between 1"),
    ({"l1": float("nan"), "architecture": "standard"}, "--l1 must be a finite number"),
    ({"steps": 0}, "--steps must be at least 1"),
    ({"lr": -1.0}, "--lr must be positive"),
])
def test_config_checks(change, message):
    with pytest.raises(ModelError, match=message):
        SaeTrainConfig(**{"d_sae": 8, "k": 2, **change}).check(4)
