"""Head detection: each scorer on hand-built patterns with known answers, and detect_heads on a
hand-built two-layer model whose weights force a previous-token, a first-token, an induction
and a duplicate-token head."""

import json
import math

import numpy as np
import pytest
import torch

from tests.helpers.models import session_for
from transformer_viewer.model.analysis.heads import (
    SCORES,
    HeadScores,
    attention_entropy,
    detect_heads,
    duplicate_token_score,
    first_token_score,
    induction_candidates,
    induction_score,
    normalise_score_name,
    previous_token_score,
    repeated_random_tokens,
)
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.decoder.hooks import count_hooks, hooks


# -- hand-built patterns -------------------------------------------------------------------------
def uniform_causal(T):
    return np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]


def rows_to(T, key_of):
    """A pattern where query q puts all its weight on key_of(q) (itself if that is not a key)."""
    p = np.zeros((T, T))
    for q in range(T):
        k = key_of(q)
        p[q, k if 0 <= k <= q else q] = 1.0
    return p


def test_previous_token_on_shift_and_uniform():
    T = 12
    assert previous_token_score(rows_to(T, lambda q: q - 1)) == pytest.approx(1.0)
    assert previous_token_score(np.eye(T)) == pytest.approx(0.0)
    expected = np.mean([1 / (i + 1) for i in range(1, T)])
    assert previous_token_score(uniform_causal(T)) == pytest.approx(expected)


def test_first_token_excludes_position_zero():
    T = 10
    assert first_token_score(rows_to(T, lambda q: 0)) == pytest.approx(1.0)
    # The identity puts row 0 on column 0, which must not count.
    assert first_token_score(np.eye(T)) == pytest.approx(0.0)
    assert first_token_score(uniform_causal(T)) == pytest.approx(np.mean([1 / (i + 1) for i in range(1, T)]))


def test_entropy_of_one_hot_and_uniform_rows():
    T = 9
    assert attention_entropy(rows_to(T, lambda q: q - 1)) == pytest.approx(0.0, abs=1e-12)
    assert attention_entropy(uniform_causal(T)) == pytest.approx(np.mean([math.log(i + 1) for i in range(1, T)]))


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_induction_and_duplicate_on_repeat_patterns(offset):
    n = 5
    T = offset + 2 * n
    second = range(offset + n, T)
    induct = rows_to(T, lambda q: q - n + 1 if q in second else q)
    dup = rows_to(T, lambda q: q - n if q in second else q)
    assert induction_score(induct, n, offset) == pytest.approx(1.0)
    assert duplicate_token_score(induct, n, offset) == pytest.approx(0.0)
    assert duplicate_token_score(dup, n, offset) == pytest.approx(1.0)
    assert induction_score(dup, n, offset) == pytest.approx(0.0)
    # Half the weight on the right key: half the score. Only the second copy counts.
    half = 0.5 * induct + 0.5 * np.eye(T)
    assert induction_score(half, n, offset) == pytest.approx(0.5)
    first_half_only = rows_to(T, lambda q: q - n + 1 if offset + n - 1 <= q < offset + n else q)
    assert induction_score(first_half_only, n, offset) == pytest.approx(0.0)


def test_scorers_keep_leading_dimensions():
    T, n = 8, 4
    batch = np.stack([np.stack([np.eye(T), rows_to(T, lambda q: q - 1), rows_to(T, lambda q: 0)])] * 2)  # (2, 3, T, T)
    assert previous_token_score(batch).shape == (2, 3)
    np.testing.assert_allclose(previous_token_score(batch)[1], [0, 1, 1 / (T - 1)])
    np.testing.assert_allclose(first_token_score(batch)[0], [0, 1 / (T - 1), 1])
    assert induction_score(batch, n).shape == (2, 3)
    assert attention_entropy(batch).shape == (2, 3)


def test_scorers_reject_bad_shapes():
    with pytest.raises(ValueError):
        previous_token_score(np.zeros((3, 4)))
    with pytest.raises(ValueError):
        first_token_score(np.ones((1, 1)))
    with pytest.raises(ValueError):
        induction_score(np.eye(9), n=5)  # 2n > T
    with pytest.raises(ValueError):
        duplicate_token_score(np.eye(10), n=5, offset=1)


# -- a hand-built model ----------------------------------------------------------------------------
V, T_CTX = 16, 16
TOK, POS, SLOT = 0, 16, 32  # residual layout: token one-hot, position one-hot, previous token


def hand_built_model() -> GPT:
    """Two layers, two heads of size 32, every weight set by hand:

    0.0 previous-token: queries carry position i shifted down by one, keys position j.
    0.1 first-token: a constant query (a bias) against the key "is position 0".
    Head 0.0's value is the token, written into SLOT: after layer 0, position j holds the
    token at j-1. Every position's residual then has the same multiset of values, so each
    LayerNorm is the same affine map at every position and only the one-hot parts decide.
    1.0 induction: query = token at i, key = previous token at j: j is the position after
        an earlier copy of token i.
    1.1 duplicate-token: query = token, key = token, minus a position match so a token does
        not pick itself.
    MLPs are zero.
    """
    cfg = GPTConfig(vocab_size=V, block_size=T_CTX, n_layer=2, n_head=2, n_embd=64)
    model = GPT(cfg)
    C, hs = cfg.n_embd, cfg.head_size
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.zero_()
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.fill_(1.0)
        model.wte.weight[torch.arange(V), TOK + torch.arange(V)] = 1.0
        model.wpe.weight[torch.arange(T_CTX), POS + torch.arange(T_CTX)] = 1.0

        a0 = model.blocks[0].attn
        w, b = a0.c_attn.weight, a0.c_attn.bias  # (3C, C): rows [0, C) q, [C, 2C) k, [2C, 3C) v
        for r in range(T_CTX - 1):
            w[r, POS + r + 1] = 5.0  # q_r of head 0 = position r + 1
        for r in range(T_CTX):
            w[C + r, POS + r] = 1.0  # k_r of head 0 = position r
        for r in range(V):
            w[2 * C + r, TOK + r] = 1.0  # v of head 0 = the token
            a0.c_proj.weight[SLOT + r, r] = 1.0  # ... written into SLOT
        b[hs] = 30.0  # head 1: constant query ...
        w[C + hs, POS + 0] = 1.0  # ... against "position 0"

        a1 = model.blocks[1].attn
        w = a1.c_attn.weight
        for r in range(V):
            w[r, TOK + r] = 15.0  # head 0: q = token at i
            w[C + r, SLOT + r] = 1.0  # k = token before j
            w[hs + r, TOK + r] = 80.0  # head 1: q = token ...
            w[C + hs + r, TOK + r] = 1.0  # ... k = token
        for m in range(T_CTX):
            w[hs + V + m, POS + m] = -160.0  # ... but not at its own position
            w[C + hs + V + m, POS + m] = 1.0
    return model.eval()


def test_hand_built_model_heads_score_near_one():
    torch.manual_seed(0)
    model = hand_built_model()
    gen = torch.Generator().manual_seed(1)
    text = [torch.randint(0, V, (T_CTX,), generator=gen).tolist() for _ in range(3)]
    s = detect_heads(session_for(model), text_ids=text, prefix=[0], induction_batch=3, seed=5)
    assert s.shape == (2, 2)
    assert s.induction_length == (T_CTX - 1) // 2
    assert s.text_positions == 3 * (T_CTX - 1)
    assert s.previous_token[0, 0] > 0.99
    assert s.first_token[0, 1] > 0.99
    assert s.entropy[0, 0] < 0.05 and s.entropy[0, 1] < 0.05
    assert s.induction[1, 0] > 0.99
    assert s.duplicate_token[1, 1] > 0.99
    # ... and each head only at its own job.
    assert s.induction[0, 0] < 0.01 and s.duplicate_token[0, 0] < 0.01
    assert s.previous_token[0, 1] < 0.1 and s.first_token[0, 0] < 0.1
    assert s.duplicate_token[1, 0] < 0.01 and s.induction[1, 1] < 0.01
    assert s.best("previous_token")[:2] == (0, 0)
    assert s.best("induction")[:2] == (1, 0)
    assert count_hooks(model) == 0


def test_replaced_pattern_is_what_gets_scored():
    """A hook that swaps a random model's layer-0 pattern for an induction pattern: detect_heads
    reads the pattern the model actually used."""
    cfg = GPTConfig(vocab_size=64, block_size=32, n_layer=1, n_head=2, n_embd=16)
    model = GPT(cfg).eval()
    n, offset = 10, 1

    def force(_m, _inp, pattern):
        T = pattern.shape[-1]
        p = pattern.clone()
        if T == offset + 2 * n:
            p[:, 1] = torch.from_numpy(rows_to(T, lambda q: q - n + 1 if q >= offset + n else q)).float()
        return p

    with hooks(model, [("blocks.0.attn.hook_pattern", force)]):
        s = detect_heads(session_for(model), text_ids=[list(range(20))], induction_length=n, prefix=[0])
    assert s.induction[0, 1] == pytest.approx(1.0)
    assert s.induction[0, 0] < 0.3
    assert count_hooks(model) == 0


def test_random_sequences_are_seeded_distinct_and_avoid_dead_rows():
    cfg = GPTConfig(vocab_size=40, block_size=32, n_layer=1, n_head=1, n_embd=8)
    model = GPT(cfg)
    with torch.no_grad():
        model.wte.weight[30:] = 0.0  # never-seen tokens after active-vocabulary training
    assert induction_candidates(model).tolist() == list(range(30))
    with torch.no_grad():
        model.wte.weight[28:] = 0.5  # ... or one shared learned row
    assert induction_candidates(model).tolist() == list(range(28))
    a = repeated_random_tokens(model, 12, 3, seed=7, prefix=[5])
    b = repeated_random_tokens(model, 12, 3, seed=7, prefix=[5])
    assert torch.equal(a, b)
    assert not torch.equal(a, repeated_random_tokens(model, 12, 3, seed=8, prefix=[5]))
    assert a.shape == (3, 25)
    for row in a.tolist():
        assert row[0] == 5
        first, second = row[1:13], row[13:]
        assert first == second and len(set(first)) == 12
        assert 5 not in first and max(first) < 30
    special = [0, 1, 2]  # a family tokenizer's <unk>, <s>, </s>
    c = repeated_random_tokens(model, 20, 4, seed=7, prefix=[5], exclude=special)  # 24 tokens left to draw
    assert not set(c[:, 1:].flatten().tolist()) & {5, *special}


def test_detect_heads_restores_training_mode_and_checks_inputs():
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=16)
    session = session_for(GPT(cfg))
    session.model.train()  # a model put back in training after the session was made
    detect_heads(session, text_ids=[[1, 2, 3, 4]], induction_length=4)
    assert session.model.training
    from transformer_viewer.model.errors import ModelError

    with pytest.raises(ModelError):
        detect_heads(session, text_ids=[[1, 2, 99]])  # outside the vocabulary
    with pytest.raises(ModelError):
        detect_heads(session, text_ids=[[1]])  # nothing to score
    with pytest.raises(ModelError):
        detect_heads(session, text_ids=[[1, 2, 3]], induction_length=9)  # 2 * 9 > 16


def test_detect_heads_stays_within_the_memory_budget_and_the_passage_count():
    """What one forward would hold is checked against the session's budget before it runs (the
    message says what fits, and that length then runs); more passages than MAX_PASSAGES are
    refused before any is tokenized; progress counts every forward pass."""
    from transformer_viewer.model.analysis.heads import MAX_PASSAGES
    from transformer_viewer.model.capture.memory_budget import scoring_bytes
    from transformer_viewer.model.errors import CaptureTooLargeError, ModelError

    cfg = GPTConfig(vocab_size=64, block_size=256, n_layer=2, n_head=2, n_embd=16)
    session = session_for(GPT(cfg))
    session.memory_budget = scoring_bytes(cfg, 40)  # a passage of 40 tokens fits, 41 do not
    long_passage = [list(range(1, 61)) * 2]
    with pytest.raises(CaptureTooLargeError, match="at most 40 tokens"):
        detect_heads(session, text_ids=long_passage, induction_length=4, induction_batch=1)
    with pytest.raises(CaptureTooLargeError, match=r"shorter --length \(at most 20, with --batch 1\)"):
        detect_heads(session, text_ids=[[1, 2, 3]], induction_length=60, induction_batch=1, prefix=[])
    with pytest.raises(CaptureTooLargeError, match="use --batch 4 or fewer at this length"):
        detect_heads(session, text_ids=[[1, 2, 3]], induction_length=10, induction_batch=50, prefix=[])
    heard = []
    detect_heads(session, text_ids=[list(range(1, 41)), [1, 2, 3]], induction_length=4, induction_batch=1,
                 prefix=[], progress=lambda done, total: heard.append((done, total)))
    assert heard[0] == (0, 3) and heard[-1] == (3, 3) and [d for d, _ in heard] == sorted(d for d, _ in heard)
    with pytest.raises(ModelError, match=f"more than the {MAX_PASSAGES:,}"):
        detect_heads(session, texts=["a b"] * (MAX_PASSAGES + 1))


def test_default_text_on_a_gpt2_vocabulary_model():
    cfg = GPTConfig(block_size=64, n_layer=1, n_head=2, n_embd=16)
    s = detect_heads(session_for(GPT(cfg)), induction_batch=1)
    assert s.induction_length == (64 - 1) // 2  # <|endoftext|> is the prefix
    assert s.text_positions > 5 * 40
    for k in SCORES:
        arr = getattr(s, k)
        assert arr.shape == (1, 2) and arr.dtype == np.float32 and np.isfinite(arr).all()
        assert not arr.flags.writeable
    assert ((s.previous_token >= 0) & (s.previous_token <= 1)).all()


def scores_of(prev):
    z = np.zeros_like(prev)
    return HeadScores(previous_token=prev, first_token=z, induction=-prev, duplicate_token=z, entropy=z,
                      text_positions=1, induction_length=1, induction_batch=1, seed=0)


def test_rows_sorting_top_and_json():
    s = scores_of(np.array([[0.1, 0.9], [0.5, 0.3]], dtype=np.float32))
    rows = s.rows()
    assert [(r["layer"], r["head"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert set(rows[0]) == {"layer", "head", *SCORES}
    top = s.rows(sort="previous-token", top=2)
    assert [(r["layer"], r["head"]) for r in top] == [(0, 1), (1, 0)]
    low = s.rows(sort="prev", descending=False, top=1)
    assert (low[0]["layer"], low[0]["head"]) == (0, 0)
    assert [(r["layer"], r["head"]) for r in s.rows(sort="induction", top=1)] == [(0, 0)]
    json.dumps(s.to_dict())
    assert s.to_dict()["scores"]["previous_token"] == [[pytest.approx(0.1), pytest.approx(0.9)],
                                                       [pytest.approx(0.5), pytest.approx(0.3)]]


def test_score_names():
    assert normalise_score_name("previous-token") == "previous_token"
    assert normalise_score_name("Duplicate_Token") == "duplicate_token"
    assert normalise_score_name("sink") == "first_token"
    with pytest.raises(ValueError):
        normalise_score_name("bogus")
