import numpy as np
import pytest
import torch

from tests.helpers.models import ANALYSIS_PROMPT, tiny_session
from transformer_viewer.model.analysis.lens import lens_labels, logit_lens
from transformer_viewer.model.decoder.hooks import count_hooks
from transformer_viewer.model.errors import ModelError


def _full_logits(session, mask=None):
    """Logits straight from the model's forward, no session caches involved."""
    ids = torch.tensor([session.tokens.ids])
    with torch.no_grad():
        logits, _ = session.model(ids)
    return logits[0, :, : session.n_vocab].float()  # (T, V)


def test_last_row_is_the_models_own_prediction():
    s = tiny_session()
    trace = s.run(top_k=5)
    lens = logit_lens(s)
    logits = _full_logits(s)
    probs = torch.softmax(logits, dim=-1)
    assert lens.row_labels == lens_labels(2) == ("0.pre", "1.pre", "final")
    np.testing.assert_array_equal(lens.top_ids[-1], logits.argmax(-1).numpy())
    np.testing.assert_allclose(lens.top_probs[-1], probs.max(-1).values.numpy(), rtol=1e-5)
    # and the session's own next-token prediction at the last position
    assert lens.top_ids[-1, -1] == trace.next.top_ids[0]
    assert lens.top_probs[-1, -1] == pytest.approx(float(trace.next.top_probs[0]), rel=1e-5)
    np.testing.assert_array_equal(lens.final_ids, lens.top_ids[-1])
    assert (lens.final_ranks[-1] == 0).all()


def test_intermediate_rows_match_a_manual_lens_and_ranks():
    s = tiny_session()
    s.run()
    lens = logit_lens(s)
    resid = s.residuals()
    with torch.no_grad():
        logits = s.model.lm_head(s.model.ln_f(resid[1][0]))[:, : s.n_vocab]  # (T, V)
    probs = torch.softmax(logits, dim=-1)
    np.testing.assert_array_equal(lens.top_ids[1], logits.argmax(-1).numpy())
    np.testing.assert_allclose(lens.top_probs[1], probs.max(-1).values.numpy(), rtol=1e-5)
    final = torch.as_tensor(lens.final_ids)
    want_rank = (logits > logits[torch.arange(len(final)), final][:, None]).sum(-1)
    np.testing.assert_array_equal(lens.final_ranks[1], want_rank.numpy())
    np.testing.assert_allclose(lens.final_probs[1], probs[torch.arange(len(final)), final].numpy(), rtol=1e-5)
    assert lens.final_ranks.shape == (3, len(s.tokens.ids))
    assert (lens.final_ranks[:-1] > 0).any(), "a random model should not know its answer at the embedding"


def test_padded_vocab_rows_are_ignored():
    from tests.helpers.models import TINY, scaled_init_loaded
    from transformer_viewer.model.capture.session import Session

    loaded = scaled_init_loaded(config=TINY.replace(vocab_size=50304))
    with torch.no_grad():
        loaded.model.wte.weight[50257:] = 100.0  # padding rows that would win every argmax
    s = Session(loaded)
    s.set_prompt("hello world")
    s.run()
    lens = logit_lens(s)
    assert lens.top_ids.max() < 50257


def test_reference_ids_and_masked_residuals_leave_the_cache_alone():
    s = tiny_session()
    s.run()
    clean = logit_lens(s)
    before = [r.clone() for r in s.residuals()]
    mask = np.zeros((2, 4), dtype=bool)
    mask[0, 2] = True
    res = s.masked_residuals(mask)
    assert count_hooks(s.model) == 0
    for a, b in zip(before, s.residuals(), strict=True):
        assert torch.equal(a, b)
    masked = logit_lens(s, res, reference_ids=clean.top_ids)
    # the masked residuals equal those of a real masked run
    s2 = tiny_session()
    s2.run(mask)
    for a, b in zip(res, s2.residuals(), strict=True):
        torch.testing.assert_close(a, b)
    assert torch.equal(res[0], before[0])  # layer 0's input cannot change
    assert not torch.equal(res[2], before[2])
    np.testing.assert_array_equal(masked.reference_ids, clean.top_ids)
    # reference probabilities are the masked lens's probability of the clean top token
    with torch.no_grad():
        p = torch.softmax(s.model.unembed(res[2][0])[:, : s.n_vocab], dim=-1)
    want = p[torch.arange(p.shape[0]), torch.as_tensor(clean.top_ids[2])]
    np.testing.assert_allclose(masked.reference_probs[2], want.numpy(), rtol=1e-5)
    with pytest.raises(ModelError):
        logit_lens(s, res, reference_ids=clean.top_ids[:, :3])


def _masked_lens_pair(mask_layer: int, window=None):
    """The masked lens with the clean lens's rows lent, and the same lens computed row by row."""
    from tests.helpers.models import TINY, scaled_init_loaded
    from transformer_viewer.model.capture.session import Session

    s = Session(scaled_init_loaded(config=TINY.replace(n_layer=4), seed=3))
    s.set_prompt(ANALYSIS_PROMPT * 2)
    s.run()
    clean = logit_lens(s, positions=window)
    mask = np.zeros((4, 4), dtype=bool)
    mask[mask_layer] = True  # every head of the layer: the final top token moves at some positions
    mask[3, 1] = True
    res = s.masked_residuals(mask)
    lent = logit_lens(s, res, reference_ids=clean.top_ids, positions=window, known=clean, known_rows=mask_layer + 1)
    full = logit_lens(s, res, reference_ids=clean.top_ids, positions=window)
    return s, res, clean, lent, full


@pytest.mark.parametrize("mask_layer", [0, 2])
def test_a_masked_lens_with_the_clean_rows_lent_equals_the_full_masked_lens(mask_layer):
    s, res, clean, lent, full = _masked_lens_pair(mask_layer, window=(3, 20))
    moved = lent.final_ids != clean.final_ids
    assert moved.any() and not moved.all(), "the test needs positions where the final top token moved, and others"
    for name in ("top_ids", "final_ids", "final_ranks", "reference_ids"):
        np.testing.assert_array_equal(getattr(lent, name), getattr(full, name), err_msg=name)
    for name in ("top_probs", "final_probs", "reference_probs"):
        np.testing.assert_allclose(getattr(lent, name), getattr(full, name), rtol=1e-5, atol=1e-7, err_msg=name)
    # the lent rows are the clean lens's top tokens, the later ones are not
    np.testing.assert_array_equal(lent.top_ids[: mask_layer + 1], clean.top_ids[: mask_layer + 1])
    assert (lent.top_ids[-1] != clean.top_ids[-1]).any()
    # and row by row against a softmax of that row's logits, for a lent row at the moved positions
    with torch.no_grad():
        logits = s.model.unembed(res[mask_layer][0, 3:20])[:, : s.n_vocab]  # (P, V)
    probs = torch.softmax(logits, dim=-1)
    cols = torch.as_tensor(np.flatnonzero(moved))
    final = torch.as_tensor(lent.final_ids)[cols]
    want_rank = (logits[cols] > logits[cols, final][:, None]).sum(-1)
    np.testing.assert_array_equal(lent.final_ranks[mask_layer, moved], want_rank.numpy())
    np.testing.assert_allclose(lent.final_probs[mask_layer, moved], probs[cols, final].numpy(), rtol=1e-5)


def test_a_lent_rows_cells_stay_the_known_lenss_where_its_positions_are_unembedded_again():
    """A lent row's positions unembedded again for a moved final token take only that token's
    rank and probability from the new pass; the row's top token and probabilities stay the
    known lens's to the bit (unembedded among other rows they may round an ulp apart), so a
    lent row's diff is exactly zero on every kernel path."""
    import dataclasses

    s, res, clean, lent, _full = _masked_lens_pair(2, window=(3, 20))
    moved = lent.final_ids != clean.final_ids
    assert moved.any()
    # the known lens an ulp off where a recomputation could land
    marked = dataclasses.replace(clean, top_probs=np.nextafter(clean.top_probs, np.float32(2)))
    again = logit_lens(s, res, reference_ids=clean.top_ids, positions=(3, 20), known=marked, known_rows=3)
    np.testing.assert_array_equal(again.top_ids[:3], clean.top_ids[:3])
    np.testing.assert_array_equal(again.top_probs[:3], marked.top_probs[:3])
    np.testing.assert_array_equal(again.reference_probs[:3], marked.top_probs[:3])  # p(clean top) lent as well
    np.testing.assert_array_equal(again.final_probs[:3, moved], lent.final_probs[:3, moved])  # the new pass's
    np.testing.assert_array_equal(again.final_ranks[:3, moved], lent.final_ranks[:3, moved])


def test_a_lent_lens_of_another_shape_is_refused():
    s = tiny_session()
    s.run()
    clean = logit_lens(s, positions=(0, 4))
    with pytest.raises(ModelError):
        logit_lens(s, known=clean, known_rows=1)


def test_lens_cells_over_uneven_blocks_match_a_softmax_of_each_row(monkeypatch):
    from transformer_viewer.model.analysis import lens_unembed

    s = tiny_session()
    s.run()
    x = torch.cat([r[0] for r in s.residuals()])  # (3 T, C): every row of the lens
    with torch.no_grad():
        logits = s.model.unembed(x)[:, : s.n_vocab]  # (N, V)
    probs = torch.softmax(logits, dim=-1)
    N = x.shape[0]
    rng = np.random.default_rng(0)
    final = rng.integers(0, s.n_vocab, N)
    final[:4] = logits[:4].argmax(-1).numpy()  # rows whose final token is their own top: rank 0
    ref = rng.integers(0, s.n_vocab, N)
    monkeypatch.setattr(lens_unembed, "ROW_BLOCK", 5)
    monkeypatch.setattr(lens_unembed, "VOCAB_BLOCK", 999)
    seen = []
    cells = lens_unembed.lens_cells(s.model, x, s.n_vocab, final, ref, step=lambda d, n: seen.append((d, n)))
    rows = torch.arange(N)
    np.testing.assert_array_equal(cells.top_ids, logits.argmax(-1).numpy())
    np.testing.assert_allclose(cells.top_probs, probs.max(-1).values.numpy(), rtol=1e-5)
    want_rank = (logits > logits[rows, final][:, None]).sum(-1)
    np.testing.assert_array_equal(cells.final_ranks, want_rank.numpy())
    assert (cells.final_ranks[:4] == 0).all() and (cells.final_ranks[4:] > 0).any()
    np.testing.assert_allclose(cells.final_probs, probs[rows, final].numpy(), rtol=1e-5)
    np.testing.assert_allclose(cells.reference_probs, probs[rows, ref].numpy(), rtol=1e-5)
    blocks = -(-s.n_vocab // 999) * -(-N // 5)
    assert seen == [(d, blocks) for d in range(1, blocks + 1)]
    own = lens_unembed.lens_cells(s.model, x, s.n_vocab)  # no final tokens asked: each row's own top
    assert (own.final_ranks == 0).all() and np.isnan(own.reference_probs).all()
    np.testing.assert_array_equal(own.final_probs, own.top_probs)


def test_count_above_counts_as_a_comparison_does():
    """The rank's count over a block, summed as bytes: ties, infinities and NaN as `>` treats them."""
    from transformer_viewer.model.analysis.lens_unembed import count_above

    g = torch.Generator().manual_seed(0)
    block = torch.randint(-3, 4, (7, 300), generator=g).float()  # many ties with the thresholds
    block[0, :5] = float("inf")
    block[1, :5] = float("-inf")
    block[2, :5] = float("nan")
    threshold = torch.tensor([0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), 2.0])
    want = (block > threshold[:, None]).sum(dim=1)
    got = count_above(block, threshold)
    assert torch.equal(got.long(), want)
    assert int(count_above(torch.ones(1, 1000), torch.zeros(1))[0]) == 1000  # past a byte's 255


def test_a_row_unembedded_again_among_other_rows_gets_the_same_cells_within_float32_rounding():
    """The vocabulary's blocks do not depend on how many rows ask, so a row unembedded again
    among other rows names the same tokens and ranks, and probabilities within the float32
    rounding of its normaliser (torch's exp and log may round an element by its place in the
    tensor: not bit for bit on every CPU, which is why a lens lends a clean row's cells)."""
    from tests.helpers.tolerances import assert_float32_close
    from transformer_viewer.model.analysis import lens_unembed

    s = tiny_session()
    s.run()
    rows = torch.cat([r[0] for r in s.residuals()])  # (3 T, C)
    x = rows[torch.arange(600) % rows.shape[0]] * torch.linspace(0.5, 2.0, 600)[:, None]  # more than ROW_BLOCK
    assert s.n_vocab > 2 * lens_unembed.VOCAB_BLOCK  # several blocks of the vocabulary
    final = np.random.default_rng(1).integers(0, s.n_vocab, x.shape[0])
    every = lens_unembed.lens_cells(s.model, x, s.n_vocab, final, final)
    some = np.array([1, 4, 5, 599])  # a few rows: another number of rows, the same blocks
    again = lens_unembed.lens_cells(s.model, x[some], s.n_vocab, final[some], final[some])
    one_over = lens_unembed.lens_cells(s.model, x[:513], s.n_vocab, final[:513], final[:513])  # no lone last row
    for name in ("top_ids", "final_ranks"):
        np.testing.assert_array_equal(getattr(again, name), getattr(every, name)[some], err_msg=name)
        np.testing.assert_array_equal(getattr(one_over, name), getattr(every, name)[:513], err_msg=name)
    for name in ("top_probs", "final_probs", "reference_probs"):  # log p = logit - normaliser (a sum of V terms)
        for got, rows in ((again, some), (one_over, slice(0, 513))):
            assert_float32_close(np.log(getattr(got, name)), np.log(getattr(every, name)[rows]),
                                 reduction=s.n_vocab, what=name)
