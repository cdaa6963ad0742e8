"""Traces of the sizes real models have (many tokens, layers, heads, neurons, a large vocabulary)
built from seeded random numbers, without running a model: what the views draw from them is
what these tests check, at sizes a forward on the test machine could not afford."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from transformer_viewer.model.capture.interventions import Intervention
from transformer_viewer.model.capture.trace import NextToken, Trace, resid_labels
from transformer_viewer.viewer.worker.requests import ModelInfo


def fake_next(n_vocab: int, position: int, seed: int = 0, k: int = 10) -> NextToken:
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(n_vocab).astype(np.float32) * 3
    probs = np.exp(logits - logits.max())
    probs = (probs / probs.sum()).astype(np.float32)
    top = np.argsort(-probs, kind="stable")[:k]
    return NextToken(position, probs, top.astype(np.int64), probs[top], logits[top])


def fake_trace(n_tokens: int = 64, n_layer: int = 2, n_head: int = 4, n_mlp: int = 128, n_vocab: int = 50257,
               keep_full: bool = False, seed: int = 0, mask: np.ndarray | None = None, run_id: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    T, L = n_tokens, n_layer
    mlp_post = rng.standard_normal((L, T, n_mlp)).astype(np.float32) if keep_full else None
    mlp_max = mlp_post.max(axis=1) if keep_full else rng.random((L, n_mlp)).astype(np.float32)
    mlp_argmax = mlp_post.argmax(axis=1) if keep_full else rng.integers(0, T, (L, n_mlp))
    n = min(T, 8)
    return Trace(
        token_ids=rng.integers(0, min(n_vocab, 50257), T).astype(np.int64),
        labels=tuple(f"t{i}" for i in range(T)), spans=tuple((i, i + 1) for i in range(T)), text="x" * T,
        dropped_tokens=0, overview_max=np.zeros((L, n_head, n, n), np.float16),
        overview_mean=np.zeros((L, n_head, n, n), np.float16), overview_cell=-(-T // n),
        resid_norms=rng.random((2 * L + 2, T)).astype(np.float32), resid_labels=resid_labels(L),
        mlp_max=mlp_max, mlp_argmax=mlp_argmax.astype(np.int64), mlp_mean=np.zeros((L, n_mlp), np.float32),
        head_norms=rng.random((L, n_head, T)).astype(np.float32),
        token_logprobs=-rng.random(T).astype(np.float32), next=fake_next(n_vocab, T - 1, seed),
        intervention=Intervention.make(SimpleNamespace(n_layer=L, n_head=n_head), mask), forward_ms=0.0,
        first_layer_run=0, run_id=run_id, mlp_post=mlp_post,
    )


def fake_info(n_layer: int, n_head: int, n_mlp: int, n_vocab: int) -> ModelInfo:
    return ModelInfo(name="fake", format="native", source="<fake>", n_layer=n_layer, n_head=n_head, n_embd=64,
                     block_size=1 << 15, n_params=0, device="cpu", n_mlp=n_mlp, vocab_size=n_vocab)


def fake_state(n_tokens: int = 64, n_layer: int = 2, n_head: int = 4, n_mlp: int = 128, n_vocab: int = 50257,
               keep_full: bool = False):
    """A ViewerState holding one fake trace (clean, nothing masked)."""
    from transformer_viewer.viewer.state import ViewerState

    state = ViewerState()
    state.set_model(fake_info(n_layer, n_head, n_mlp, n_vocab))
    trace = fake_trace(n_tokens, n_layer, n_head, n_mlp, n_vocab, keep_full)
    state.set_traces(trace, trace)
    return state
