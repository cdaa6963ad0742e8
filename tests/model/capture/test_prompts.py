"""The example prompts ship, load, and fit the bundled model's context."""

from transformer_viewer.model.capture.prompts import ExamplePrompt, example_prompts
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer


def test_example_prompts_load_and_fit():
    prompts = example_prompts()
    assert 6 <= len(prompts) <= 10
    tok = Tokenizer()
    titles = set()
    for p in prompts:
        assert isinstance(p, ExamplePrompt)
        assert p.title and p.text.strip() and p.shows
        assert p.title not in titles
        titles.add(p.title)
        assert 10 <= len(tok.encode(p.text)) <= 256


def test_each_prompt_repeats_something():
    """Induction or previous-token behaviour needs a repeat: some run of 3+ tokens (or a name)
    occurs twice in every prompt."""
    tok = Tokenizer()
    for p in example_prompts():
        if p.corrupted:  # a patching example compares two prompts instead
            continue
        ids = tok.encode(p.text)
        grams = [tuple(ids[i:i + 3]) for i in range(len(ids) - 2)]
        assert len(set(grams)) < len(grams), p.title


def test_a_patching_example_pairs_its_prompts_position_by_position():
    """A patching example's corrupted prompt tokenizes to the clean one's length (every kind can
    be patched by position), differs from it, and names a pair of single tokens."""
    tok = Tokenizer()
    pairs = [p for p in example_prompts() if p.corrupted]
    assert pairs
    for p in pairs:
        clean, corrupted = tok.encode(p.text), tok.encode(p.corrupted)
        assert len(clean) == len(corrupted) and clean != corrupted, p.title
        assert len(p.tokens) == 2 and all(len(tok.encode(t)) == 1 for t in p.tokens), p.title
