"""Training windows with a repeated passage: what is rewritten, how often, reproducibly, and
that training with them records the fraction and still evaluates on natural text."""

import numpy as np
import pytest
import torch

from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.training.data import load_corpus
from transformer_viewer.model.training.train import TrainConfig, batch, evaluate, train
from transformer_viewer.model.training.train_batches import MIN_PASSAGE, repeat_passages

DATA = np.arange(5000, dtype=np.uint16)  # every token distinct, so a copy is visible


def windows(n, block=32, seed=0, fraction=1.0):
    gen = torch.Generator().manual_seed(seed)
    return repeat_passages(*batch(DATA, block, n, gen), fraction, gen)


def copied_passage(row: np.ndarray) -> tuple[int, int, int] | None:
    """(src, dst, length) of the one passage of an arange window copied later into itself, or
    None if the window is untouched; asserts everything outside the copy is the original text."""
    start = int(row[0])
    changed = np.flatnonzero(row != start + np.arange(len(row)))
    if len(changed) == 0:
        return None
    dst, length = int(changed[0]), int(changed[-1] - changed[0] + 1)
    src = int(row[dst]) - start
    assert np.array_equal(row[dst : dst + length], row[src : src + length]), "the copy is one passage"
    return src, dst, length


def test_fraction_zero_changes_nothing_and_draws_nothing():
    gen = torch.Generator().manual_seed(3)
    x, y = batch(DATA, 16, 8, gen)
    state = gen.get_state()
    x2, y2 = repeat_passages(x, y, 0.0, gen)
    assert x2 is x and y2 is y
    assert torch.equal(gen.get_state(), state)  # so a run without repeats keeps its old batches


def test_every_window_repeats_one_earlier_passage_of_itself():
    x, y = windows(64, block=32)
    assert torch.equal(y[:, :-1], x[:, 1:])  # still next-token pairs of one window
    seq = torch.cat([x, y[:, -1:]], dim=1).numpy()  # (B, T + 1)
    lengths = []
    for row in seq:
        found = copied_passage(row)
        assert found is not None
        src, dst, length = found
        # A passage of at most half the window, copied after its end (the original is intact).
        assert dst >= src + length and length <= len(row) // 2
        lengths.append(length)
    assert max(lengths) > 2 * MIN_PASSAGE and min(lengths) < 12  # lengths vary over the range


def test_the_fraction_of_windows_rewritten():
    x, y = windows(400, block=32, fraction=0.25)
    seq = torch.cat([x, y[:, -1:]], dim=1).numpy()
    rewritten = sum(copied_passage(row) is not None for row in seq)
    assert 70 <= rewritten <= 130  # 100 expected; a binomial sd is about 9


def test_same_seed_same_windows_other_seed_other_windows():
    a, b, c = windows(8, seed=5), windows(8, seed=5), windows(8, seed=6)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_windows_too_short_for_a_copy_are_left_alone():
    gen = torch.Generator().manual_seed(0)
    x, y = batch(DATA, 2 * MIN_PASSAGE - 2, 4, gen)
    x2, y2 = repeat_passages(x, y, 1.0, gen)
    assert torch.equal(x2, x) and torch.equal(y2, y)


@pytest.mark.parametrize("fraction", [-0.1, 1.5, float("nan")])
def test_a_fraction_outside_zero_to_one_is_refused(fraction):
    x, y = batch(DATA, 16, 2, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="between 0 and 1"):
        repeat_passages(x, y, fraction, torch.Generator())


def test_training_with_repeats_records_the_fraction_and_validates_on_natural_text(tmp_path):
    rng = np.random.default_rng(0)
    words = ["the", "king", "said", "unto", "him", "and", "lord", "of", "hosts", "thou", "art"]
    path = tmp_path / "tiny.txt"
    path.write_text("\n".join(" ".join(rng.choice(words, size=8)) + "." for _ in range(60)))
    corpus = load_corpus([str(path)], val_fraction=0.2)
    config = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16)
    tc = TrainConfig(steps=4, batch_size=4, lr=1e-2, warmup=1, eval_every=4, eval_batches=2, seed=2)
    curves = {}
    for fraction in (0.0, 0.5):
        losses = []
        record = train(corpus, config, TrainConfig(**{**tc.__dict__, "repeat_fraction": fraction}),
                       str(tmp_path / f"r{fraction}.safetensors"), on_step=lambda i, out=losses: out.append(i["loss"]))
        assert record["train_config"]["repeat_fraction"] == fraction
        curves[fraction] = losses
    assert curves[0.0] != curves[0.5]  # the rewritten windows were trained on
    # The validation figure is the plain evaluation of the saved model: natural text only.
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint

    loaded = load_checkpoint(str(tmp_path / "r0.5.safetensors"))
    assert loaded.training["final_val_loss"] == pytest.approx(evaluate(loaded.model, corpus.val, tc, "cpu"), abs=1e-6)


def test_the_train_command_takes_the_fraction(tmp_path, capsys):
    from tests.helpers.training import TINY_FLAGS, write_text
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.viewer.cli.main import main

    data = write_text(tmp_path / "plain.txt")
    out = tmp_path / "m.safetensors"
    assert main(["train", "--data", data, "--out", str(out), *TINY_FLAGS, "--repeat-fraction", "0.5"]) == 0
    assert load_checkpoint(str(out)).training["train_config"]["repeat_fraction"] == 0.5
    bad = tmp_path / "bad.safetensors"
    assert main(["train", "--data", data, "--out", str(bad), *TINY_FLAGS, "--repeat-fraction", "1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "error: --repeat-fraction must be between 0 and 1, got 1.5" and not bad.exists()
