"""Prompt-pairs files (model/analysis/patching/pairs.py): bounded and checked, and their grids
averaged as the mean of each pair's grid."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.models import tiny_session
from tests.helpers.patch_references import CLEAN, CORRUPTED
from transformer_viewer.model.analysis.patching import pairs as pairs_module
from transformer_viewer.model.analysis.patching.exact import patch_grid
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.analysis.patching.pairs import parse_pairs, patch_grid_over_pairs, read_pairs
from transformer_viewer.model.errors import ModelError

MARY, JOHN = 5335, 1757
PAIRS = [(CLEAN, CORRUPTED), ("When Tom and Anna went to the park, Anna gave a ball to",
                              "When Tom and Anna went to the park, Tom gave a ball to")]


def test_a_pairs_file_is_read(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("\n".join(f"{a}\t{b}" for a, b in PAIRS) + "\n\n", encoding="utf-8")
    assert read_pairs(str(path)) == PAIRS


@pytest.mark.parametrize("text, message", [
    ("no tab here\n", "one tab"), ("a\tb\tc\n", "2 tabs"), ("a\t \n", "one tab"), ("\n\n", "no prompt pairs"),
    ("x" * (pairs_module.MAX_LINE_CHARS + 1) + "\tb\n", "characters"),
    ("a\tb\n" * (pairs_module.MAX_PAIRS + 1), "more than"),
])
def test_bad_pairs_are_one_line(text, message):
    with pytest.raises(ModelError, match=message) as e:
        parse_pairs(text, "pairs.tsv")
    assert "\n" not in str(e.value) and str(e.value).startswith("pairs.tsv")


def test_binary_missing_and_huge_files_are_refused(tmp_path, monkeypatch):
    binary = tmp_path / "b.tsv"
    binary.write_bytes(b"a\tb\x00\n")
    with pytest.raises(ModelError, match="not a text file"):
        read_pairs(str(binary))
    with pytest.raises(ModelError, match="not found"):
        read_pairs(str(tmp_path / "none.tsv"))
    monkeypatch.setattr(pairs_module, "MAX_PAIRS_BYTES", 4)
    with pytest.raises(ModelError, match="bytes"):
        read_pairs(str(binary))


def test_the_grid_of_pairs_is_the_mean_of_their_grids():
    s = tiny_session(CLEAN)
    metric = PatchMetric.make("logit-diff", (MARY, JOHN))
    seen = []
    mean = patch_grid_over_pairs(s, PAIRS, "heads", lambda _s: metric, progress=lambda d, t: seen.append((d, t)))
    grids = []
    for clean, corrupted in PAIRS:
        s.set_prompt(clean)
        s.set_corrupted(corrupted)
        grids.append(patch_grid(s, "heads", metric))
    np.testing.assert_allclose(mean.raw, (grids[0].raw + grids[1].raw) / 2, rtol=1e-6, atol=1e-6)
    assert mean.clean == pytest.approx((grids[0].clean + grids[1].clean) / 2)
    assert mean.corrupted == pytest.approx((grids[0].corrupted + grids[1].corrupted) / 2)
    assert "2 prompt pairs" in mean.note and seen == [(1, 2), (2, 2)]


def test_pairs_of_different_lengths_are_not_averaged_by_position():
    s = tiny_session(CLEAN)
    metric = PatchMetric.make("kl")
    with pytest.raises(ModelError, match="different lengths"):
        patch_grid_over_pairs(s, [(CLEAN, CORRUPTED), ("A short one", "A short two")], "resid", lambda _s: metric)
