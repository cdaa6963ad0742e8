import numpy as np
import pytest

from tests.helpers.models import tiny_session
from transformer_viewer.model.analysis.generate import generate
from transformer_viewer.model.decoder.hooks import count_hooks
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.tokenizers.tokenizer import Tokenized


def _step_by_step_greedy(session, ids, n, mask=None, ablation="zero", probs=None):
    """Greedy by hand: the argmax of Session.predict after each appended token (its
    probability appended to `probs` when given)."""
    ids = list(ids)
    out = []
    for _ in range(n):
        window = ids[-session.config.block_size:]
        session.set_tokens(Tokenized(tuple(window), tuple("?" * len(window)), tuple((0, 0) for _ in window), ""))
        nxt = session.predict(mask, ablation, top_k=session.n_vocab)
        best = int(np.argmax(nxt.probs))
        out.append(best)
        ids.append(best)
        if probs is not None:
            probs.append(float(nxt.probs[best]))
    return out


def test_greedy_equals_argmax_of_predict():
    s = tiny_session()
    gen = generate(s, 6)
    assert gen.greedy and gen.seed is None
    ref = tiny_session()
    assert gen.new_ids.tolist() == _step_by_step_greedy(ref, ref.tokens.ids, 6)
    assert gen.text == s.tokens.text + gen.new_text
    assert gen.new_text == s.tokenizer.decode(gen.new_ids)
    assert count_hooks(s.model) == 0


def test_greedy_with_a_mask_follows_the_masked_model():
    mask = np.zeros((2, 4), dtype=bool)
    mask[0, :] = True
    s = tiny_session()
    gen = generate(s, 4, mask=mask)
    ref = tiny_session()
    assert gen.new_ids.tolist() == _step_by_step_greedy(ref, ref.tokens.ids, 4, mask)
    assert gen.new_ids.tolist() != generate(s, 4).new_ids.tolist(), "masking layer 0 should change the text"


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_greedy_with_last_layer_heads_masked_follows_the_masked_model(ablation):
    # The last layer computes the last position alone, except where a head's mean needs them all.
    mask = np.zeros((2, 4), dtype=bool)
    mask[1, :3] = True
    s = tiny_session()
    gen = generate(s, 4, mask=mask, ablation=ablation)
    ref, probs = tiny_session(), []
    assert gen.new_ids.tolist() == _step_by_step_greedy(ref, ref.tokens.ids, 4, mask, ablation, probs)
    np.testing.assert_allclose(gen.new_probs, probs, rtol=1e-5, atol=1e-7)


def test_sampling_is_reproducible_with_a_seed():
    s = tiny_session()
    a = generate(s, 12, temperature=1.0, seed=1234)
    b = generate(s, 12, temperature=1.0, seed=1234)
    c = generate(s, 12, temperature=1.0, seed=99)
    assert a.new_ids.tolist() == b.new_ids.tolist()
    assert a.new_ids.tolist() != c.new_ids.tolist()
    assert a.seed == 1234 and not a.greedy
    unseeded = generate(s, 3, temperature=1.0)
    assert isinstance(unseeded.seed, int)
    again = generate(s, 3, temperature=1.0, seed=unseeded.seed)
    assert again.new_ids.tolist() == unseeded.new_ids.tolist()


def test_top_k_one_is_greedy_and_top_k_limits_choices():
    s = tiny_session()
    assert generate(s, 5, temperature=2.0, top_k=1, seed=3).new_ids.tolist() == generate(s, 5).new_ids.tolist()
    nxt = s.predict(top_k=3)
    firsts = {int(generate(s, 1, temperature=5.0, top_k=3, seed=k).new_ids[0]) for k in range(20)}
    assert firsts <= set(nxt.top_ids.tolist()) and len(firsts) > 1


def test_window_slides_past_block_size():
    s = tiny_session()
    s.set_prompt(" one two three" * 20)  # 60 tokens of a 64-token context
    assert len(s.tokens.ids) == 60
    gen = generate(s, 10)
    assert len(gen.new_ids) == 10
    ref = tiny_session()
    assert gen.new_ids.tolist() == _step_by_step_greedy(ref, s.tokens.ids, 10)


def test_cancel_and_bad_arguments():
    s = tiny_session()
    n = {"k": 0}

    def cancel():
        n["k"] += 1
        return n["k"] > 3
    gen = generate(s, 10, is_cancelled=cancel)
    assert gen.cancelled and len(gen.new_ids) == 3
    for kwargs in ({"temperature": -1.0}, {"top_k": 0}, {"ablation": "x"}, {"mask": np.zeros((3, 4))}):
        with pytest.raises(ModelError):
            generate(s, 2, **kwargs)
    with pytest.raises(ModelError, match="between 0"):
        generate(s, -1)
