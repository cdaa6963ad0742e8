"""What one capture recorded, as numpy arrays in frozen dataclasses: these cross to the GUI
thread and into exports, so nothing here holds a tensor."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NextToken:
    """The next-token distribution at one position."""

    position: int
    probs: np.ndarray  # (V,) float32, over the tokenizer's vocabulary
    top_ids: np.ndarray  # (k,) int64, most likely first
    top_probs: np.ndarray  # (k,) float32
    top_logits: np.ndarray  # (k,) float32


@dataclass(frozen=True)
class Trace:
    """Everything one capture recorded."""

    token_ids: np.ndarray  # (T,) int64
    labels: tuple[str, ...]  # visible label of each token
    spans: tuple[tuple[int, int], ...]  # character span of each token in `text`
    text: str  # the text that was run (after truncation to the context)
    dropped_tokens: int  # tokens cut from the front to fit block_size
    attention: np.ndarray  # (L, nh, T, T), rows are queries, float16 unless asked otherwise
    resid_norms: np.ndarray  # (2L + 2, T) float32, rows named by resid_labels
    resid_labels: tuple[str, ...]  # "embed", "0.pre", "0.mid", ..., "final"
    mlp_post: np.ndarray  # (L, T, n_mlp), post-activation
    head_norms: np.ndarray  # (L, nh, T) float32, L2 norm of each head's write to the residual
    token_logprobs: np.ndarray  # (T,) float32, log p(token t | tokens < t); NaN at t = 0
    next: NextToken
    mask: np.ndarray  # (L, nh) bool, the heads that were ablated
    ablation: str  # "zero" or "mean"
    forward_ms: float
    first_layer_run: int  # 0 for a full run; l when layers < l were reused from the cache

    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.shape[0])


def resid_labels(n_layer: int) -> tuple[str, ...]:
    rows = ["embed"]
    for layer in range(n_layer):
        rows += [f"{layer}.pre", f"{layer}.mid"]
    return tuple(rows + ["final"])
