"""Sessions that keep no full arrays (only pooled overviews and summaries), as the app's worker
session does: a worker session and a state holding its traces."""

from __future__ import annotations

import numpy as np

from tests.helpers.interventions import ablating
from tests.helpers.models import scaled_init_loaded
from transformer_viewer.model.decoder.config import GPTConfig

# block_size over 256 so a prompt can be longer than one overview cell per token.
LONG = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=1024, vocab_size=50257)
LONG_PROMPT = " ".join(["The cat sat on the mat because the cat was tired, and the dog barked at it."] * 30)


def compact_session(config: GPTConfig = LONG, seed: int = 3):
    from transformer_viewer.viewer.worker.handlers import WorkerSession

    return WorkerSession(scaled_init_loaded(config, seed=seed), keep_full=False)


def traced_state(session, text: str = LONG_PROMPT, mask=None):
    """A ViewerState showing `text` run on `session` (masked by `mask` when given)."""
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.worker.handlers import handle_trace
    from transformer_viewer.viewer.worker.requests import TraceRequest

    state = ViewerState()
    state.set_model(session.info())
    state.set_prompt(text)
    result = handle_trace(session, TraceRequest(text=text, intervention=ablating(mask)), lambda *a: None, lambda: False)
    state.set_traces(result.trace, result.clean)
    return state


def no_mask(session) -> np.ndarray:
    c = session.config
    return np.zeros((c.n_layer, c.n_head), dtype=bool)
