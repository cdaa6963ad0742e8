"""Training: the lr schedule, reproducibility, the exact active-vocabulary loss, the training
record, Ctrl-C and --resume. Tiny models on a tiny text file, a few steps each."""

import hashlib
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from tests.helpers.tolerances import float32_atol
from tests.helpers.training import write_text
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.training.data import load_corpus
from transformer_viewer.model.training.train import (
    ActiveVocabLoss,
    TrainConfig,
    TrainingInterrupted,
    batch,
    lr_at,
    restore_optimizer,
    train,
)

TINY = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16)
TC = TrainConfig(steps=6, batch_size=4, lr=1e-2, warmup=2, eval_every=3, eval_batches=2, seed=11)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    return write_text(tmp_path_factory.mktemp("data") / "tiny.txt")


@pytest.fixture(scope="module")
def corpus(text_file):
    return load_corpus([text_file], val_fraction=0.2)


def run_losses(corpus, out, tc=TC, config=TINY, **kw):
    losses = []
    record = train(corpus, config, tc, str(out), on_step=lambda i: losses.append(i["loss"]), **kw)
    return losses, record


# -- schedule --------------------------------------------------------------------------------------
def test_lr_warms_up_linearly_then_decays_by_cosine_to_the_floor():
    tc = TrainConfig(steps=100, lr=1.0, warmup=10, min_lr_ratio=0.1)
    warm = [lr_at(s, tc) for s in range(10)]
    assert warm == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert lr_at(10, tc) == pytest.approx(1.0)  # the peak, where decay begins
    decay = [lr_at(s, tc) for s in range(10, 101)]
    assert (np.diff(decay) <= 1e-12).all()
    assert lr_at(55, tc) == pytest.approx(0.1 + 0.5 * 0.9)  # halfway: midway between peak and floor
    assert lr_at(100, tc) == pytest.approx(0.1)
    assert lr_at(500, tc) == pytest.approx(0.1)  # never below the floor
    s = 32
    assert lr_at(s, tc) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * (s - 10) / 90)))


def test_batches_are_windows_of_the_data():
    data = np.arange(100, dtype=np.uint16)
    x, y = batch(data, 8, 5, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 8) and x.dtype == torch.int64
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y[:, -1], x[:, -1] + 1)


# -- the active-vocabulary loss ----------------------------------------------------------------------
def assert_same_loss(got: float, want: float, config: GPTConfig) -> None:
    """Two float32 cross-entropies of the same logits, normalised over the vocabulary in
    different orders and groupings (V logits, or the seen ones and one collapsed logit): the
    normaliser's sum of V terms is the longest reduction, and its relative rounding is the
    loss's absolute one (tests/helpers/tolerances.py)."""
    assert got == pytest.approx(want, abs=float32_atol(config.vocab_size))


def grads(model, loss):
    params = dict(model.named_parameters())
    return dict(zip(params, torch.autograd.grad(loss, list(params.values())), strict=True))


def test_active_vocab_loss_equals_full_cross_entropy_and_its_gradient(corpus):
    torch.manual_seed(1)
    model = GPT(TINY)
    loss_fn = ActiveVocabLoss(model, corpus.train)
    unseen = np.setdiff1d(np.arange(TINY.vocab_size), np.unique(corpus.train))
    assert len(loss_fn.active) == len(np.unique(corpus.train)) < 100
    assert (model.wte.weight[torch.from_numpy(unseen)] == 0).all()
    x, y = batch(corpus.train, TINY.block_size, 4, torch.Generator().manual_seed(2))
    active = loss_fn(model, x, y)
    full = model(x, y)[1]
    assert_same_loss(active.item(), full.item(), TINY)
    g_active, g_full = grads(model, active), grads(model, model(x, y)[1])
    assert (g_full["wte.weight"][torch.from_numpy(unseen)] != 0).any()  # unseen rows do learn
    for name in g_full:
        torch.testing.assert_close(g_active[name], g_full[name], atol=1e-7, rtol=1e-4, msg=name)


def test_active_vocab_training_is_full_vocab_training(corpus):
    """A few AdamW steps with either loss, from the same start: the same weights, and the
    unseen rows move but stay equal to each other."""
    from transformer_viewer.model.training.train import make_optimizer

    torch.manual_seed(4)
    a = GPT(TINY)
    loss_fn = ActiveVocabLoss(a, corpus.train)
    b = GPT(TINY)
    b.load_state_dict(a.state_dict())
    opts = [make_optimizer(m, TC) for m in (a, b)]
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        x, y = batch(corpus.train, TINY.block_size, 4, gen)
        for m, opt, loss in ((a, opts[0], loss_fn(a, x, y)), (b, opts[1], b(x, y)[1])):
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), TC.grad_clip)
            opt.step()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, atol=1e-5, rtol=1e-4, msg=name)
    rows = a.wte.weight[loss_fn.inactive]
    assert (rows != 0).any() and (rows == rows[0]).all()
    x, y = batch(corpus.train, TINY.block_size, 4, gen)
    assert_same_loss(loss_fn(a, x, y).item(), a(x, y)[1].item(), TINY)


def test_frozen_unseen_rows_same_loss_but_no_gradient(corpus):
    """The first version, kept to reproduce runs made with it: same loss value, but the rows of
    unseen tokens get no gradient (the full loss would give them one)."""
    model = GPT(TINY)
    loss_fn = ActiveVocabLoss(model, corpus.train, freeze_unseen=True)
    x, y = batch(corpus.train, TINY.block_size, 4, torch.Generator().manual_seed(2))
    active = loss_fn(model, x, y)
    assert_same_loss(active.item(), model(x, y)[1].item(), TINY)
    rows = loss_fn.inactive
    assert (grads(model, active)["wte.weight"][rows] == 0).all()
    assert (grads(model, model(x, y)[1])["wte.weight"][rows] != 0).any()


def test_active_vocab_loss_when_every_token_is_seen():
    cfg = GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=1, n_embd=8)
    model = GPT(cfg)
    data = np.arange(32, dtype=np.uint16).repeat(3)
    loss_fn = ActiveVocabLoss(model, data)
    assert loss_fn.unseen_logit == float("-inf")
    x, y = batch(data, 8, 3, torch.Generator().manual_seed(0))
    assert_same_loss(loss_fn(model, x, y).item(), model(x, y)[1].item(), cfg)


def test_active_vocab_loss_keeps_learned_rows_of_a_resumed_model(corpus):
    """Resuming on other data must not wipe embeddings the model already learned."""
    for freeze in (False, True):
        model = GPT(TINY)
        before = model.wte.weight.detach().clone()
        loss_fn = ActiveVocabLoss(model, corpus.train[:50], zero_unseen=False, freeze_unseen=freeze)
        assert torch.equal(model.wte.weight, before)
        assert len(loss_fn.inactive) <= 1  # random rows are all different: nothing to collapse
        x, y = batch(corpus.train[:50], TINY.block_size, 2, torch.Generator().manual_seed(0))
        assert_same_loss(loss_fn(model, x, y).item(), model(x, y)[1].item(), TINY)


# -- runs ------------------------------------------------------------------------------------------
def test_same_seed_same_curve_other_seed_other_curve(corpus, tmp_path):
    a, _ = run_losses(corpus, tmp_path / "a.safetensors")
    b, _ = run_losses(corpus, tmp_path / "b.safetensors")
    assert len(a) == TC.steps and a == b
    c, _ = run_losses(corpus, tmp_path / "c.safetensors", tc=replace(TC, seed=12))
    assert c != a
    assert a[-1] < a[0]  # it learns something


def test_checkpoint_records_the_training(corpus, text_file, tmp_path):
    out = tmp_path / "m.safetensors"
    _, record = run_losses(corpus, out, argv=["transformer-viewer", "train", "--steps", "6"])
    loaded = load_checkpoint(str(out))
    t = loaded.training
    with open(text_file, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert t["data"] == [{"path": "tiny.txt", "sha256": digest, "tokens": len(corpus.train) + len(corpus.val)}]
    assert t["steps"] == 6 and t["seed"] == 11
    assert [h["step"] for h in t["history"]] == [3, 6]
    assert all(np.isfinite([h["train_loss"], h["val_loss"]]).all() for h in t["history"])
    assert t["final_val_loss"] == t["history"][-1]["val_loss"]
    assert t["final_train_loss"] == pytest.approx(record["final_train_loss"])
    assert t["wall_time_s"] >= 0 and t["command"][:2] == ["transformer-viewer", "train"]
    assert isinstance(t["unigram_val_loss"], float) and t["unigram_val_loss"] > 0
    assert t["train_config"]["steps"] == 6 and t["model_config"]["n_embd"] == 16
    assert "interrupted" not in t


def test_final_checkpoint_in_float16(corpus, tmp_path):
    from safetensors import safe_open

    out = tmp_path / "h.safetensors"
    run_losses(corpus, out, tc=replace(TC, steps=2, save_dtype="float16"))
    with safe_open(str(out), framework="pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}


def test_ctrl_c_saves_and_resume_continues_the_same_curve(corpus, tmp_path):
    full, _ = run_losses(corpus, tmp_path / "full.safetensors")

    out = tmp_path / "cut.safetensors"
    seen = []

    def stop_at_4(info):
        seen.append(info["loss"])
        if info["step"] == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as exc:
        train(corpus, TINY, TC, str(out), on_step=stop_at_4)
    assert isinstance(exc.value, TrainingInterrupted) and exc.value.record["steps"] == 4
    saved = load_checkpoint(str(out)).training
    assert saved["steps"] == 4 and saved["interrupted"] is True
    assert [h["step"] for h in saved["history"]] == [3]

    rest, record = run_losses(corpus, out, resume=True)
    assert record["steps"] == TC.steps
    assert seen + rest == full  # steps 5..6 continue exactly: weights, AdamW moments, batches
    t = load_checkpoint(str(out)).training
    assert t["steps"] == 6 and [h["step"] for h in t["history"]] == [3, 6]
    assert t["resumed"][0]["from_step"] == 4 and t["resumed"][0]["optimizer_restored"] is True
    assert "interrupted" not in t


def test_resume_accumulates_steps(corpus, tmp_path):
    out = tmp_path / "r.safetensors"
    run_losses(corpus, out, tc=replace(TC, steps=3))
    first = load_checkpoint(str(out)).training
    more, record = run_losses(corpus, out, tc=replace(TC, steps=5), resume=True)
    assert len(more) == 2 and record["steps"] == 5
    assert record["wall_time_s"] >= first["wall_time_s"]
    # Nothing left to do: no step runs, and the record keeps its last train loss.
    none, again = run_losses(corpus, out, tc=replace(TC, steps=5), resume=True)
    assert none == [] and again["steps"] == 5 and again["final_train_loss"] == pytest.approx(record["final_train_loss"])


def test_optimizer_state_of_another_step_is_not_restored(corpus, tmp_path):
    out = tmp_path / "o.safetensors"
    run_losses(corpus, out, tc=replace(TC, steps=2))
    from transformer_viewer.model.training.train import make_optimizer

    opt = make_optimizer(load_checkpoint(str(out)).model, TC)
    assert restore_optimizer(opt, str(out), 3) is False and not opt.state
    assert restore_optimizer(opt, str(out), 2) is True and opt.state


def test_resume_without_a_checkpoint_and_too_little_data(corpus, tmp_path):
    with pytest.raises(ModelError, match="resume"):
        train(corpus, TINY, TC, str(tmp_path / "absent.safetensors"), resume=True)
    with pytest.raises(ModelError, match="block_size"):
        train(corpus, TINY.replace(block_size=len(corpus.val)), TC, str(tmp_path / "x.safetensors"))
    assert not (tmp_path / "x.safetensors").exists()
