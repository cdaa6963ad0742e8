"""Inputs of the training tests: a tiny text file of seeded words and the flags of a tiny
`transformer-viewer train` run."""

from __future__ import annotations

import numpy as np

# A one-layer model trained for four steps: seconds on one core.
TINY_FLAGS = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
              "--steps", "4", "--warmup", "1", "--eval-every", "2", "--eval-batches", "2", "--val-fraction", "0.2",
              "--device", "cpu", "--seed", "5"]


def write_text(path, n=60):
    """n lines of eight words from a small vocabulary (seeded) written to `path`; returns the path."""
    rng = np.random.default_rng(0)
    words = ["the", "king", "said", "unto", "him", "and", "lord", "of", "hosts", "thou", "art", "my", "son"]
    lines = [" ".join(rng.choice(words, size=8)).capitalize() + "." for _ in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)
