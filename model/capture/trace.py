"""What one capture recorded, as numpy arrays in frozen dataclasses: these cross to the GUI
thread and into exports, so nothing here holds a tensor."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transformer_viewer.model.capture.interventions import Intervention


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
    """Everything one capture recorded.

    Linear in T: a head's full pattern and a layer's MLP activations are not kept but recomputed
    on demand (model/capture/on_demand.py) from the session's cached residual stream of run `run_id`.
    """

    token_ids: np.ndarray  # (T,) int64
    labels: tuple[str, ...]  # visible label of each token
    spans: tuple[tuple[int, int], ...]  # character span of each token in `text`
    text: str  # the text that was run (after truncation to the context)
    dropped_tokens: int  # tokens cut from the front to fit block_size
    overview_max: np.ndarray  # (L, nh, n, n), each cell the max of its block of the pattern
    overview_mean: np.ndarray  # (L, nh, n, n), each cell the mean (future zeros included)
    overview_cell: int  # tokens per cell side (1: the overview is the pattern itself)
    resid_norms: np.ndarray  # (2L + 2, T) float32, rows named by resid_labels
    resid_labels: tuple[str, ...]  # "embed", "0.pre", "0.mid", ..., "final"
    mlp_max: np.ndarray  # (L, n_mlp) float32, each neuron's largest post-activation over the tokens
    mlp_argmax: np.ndarray  # (L, n_mlp) int64, the token where it is largest
    mlp_mean: np.ndarray  # (L, n_mlp) float32, its mean over the tokens
    head_norms: np.ndarray  # (L, nh, T) float32, L2 norm of each head's write to the residual
    token_logprobs: np.ndarray | None  # (T,) float32, log p(token t | tokens < t); NaN at t = 0; None: not yet
    next: NextToken
    intervention: Intervention  # what the run changed (its head mask and ablation)
    forward_ms: float
    first_layer_run: int  # 0 for a full run; l when layers < l were reused from the cache
    special: tuple[bool, ...] = ()  # per token: a special token (BOS, <|endoftext|>), shown apart
    run_id: int = 0  # which of the session's runs made it (what on-demand recomputation starts from)
    attention: np.ndarray | None = None  # (L, nh, T, T) float16, only from a session made with keep_full
    mlp_post: np.ndarray | None = None  # (L, T, n_mlp), post-activation, only with keep_full

    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def mask(self) -> np.ndarray:
        """(L, nh) bool, read-only: the heads that were ablated."""
        return self.intervention.mask

    @property
    def ablation(self) -> str:
        return self.intervention.ablation

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays this trace holds."""
        arrays = [self.token_ids, self.overview_max, self.overview_mean, self.resid_norms, self.mlp_max,
                  self.mlp_argmax, self.mlp_mean, self.head_norms, self.token_logprobs, self.next.probs,
                  self.next.top_ids, self.next.top_probs, self.next.top_logits, self.mask, self.attention,
                  self.mlp_post]
        return sum(a.nbytes for a in {id(a): a for a in arrays if a is not None}.values())  # shared once


def resid_labels(n_layer: int) -> tuple[str, ...]:
    rows = ["embed"]
    for layer in range(n_layer):
        rows += [f"{layer}.pre", f"{layer}.mid"]
    return tuple(rows + ["final"])
