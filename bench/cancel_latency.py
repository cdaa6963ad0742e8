"""How soon a long capture stops once cancelled: a model of SmolLM2-135M's shape (random weights,
built directly), an N-token capture cancelled from another thread after a few seconds, as the
window's Cancel button does; the figure is the time from the flag turning true to `Cancelled`
reaching the caller. Also a prediction from layer 0 (a head toggled in the first layer).

    python bench/cancel_latency.py [--tokens 8192] [--after 2,4.5,7] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import torch
from common import cancelled_after, machine, set_threads
from long_prompts import SMOL

from transformer_viewer.model.checkpoint import LoadedModel
from transformer_viewer.model.config import GPTConfig
from transformer_viewer.model.gpt import GPT
from transformer_viewer.model.session import Session
from transformer_viewer.model.tokenizer import Tokenized


def smol_session(T: int) -> Session:
    torch.manual_seed(0)
    config = GPTConfig(block_size=max(T, 2048), positional="rotary", norm="rmsnorm", mlp="gated",
                       activation="silu", bias=False, **SMOL)
    loaded = LoadedModel(model=GPT(config).eval(), config=config, format="native", source="<bench>", name="smol-shape")
    session = Session(loaded)
    ids = tuple(int(i) for i in np.random.default_rng(0).integers(0, config.vocab_size, T))
    session.set_tokens(Tokenized(ids, tuple("t" for _ in ids), tuple((i, i + 1) for i in range(T)), "t" * T))
    return session


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--after", default="2,4.5,7", help="seconds after the start to cancel, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    set_threads(args.threads)
    T = args.tokens
    session = smol_session(T)
    tok = session.tokens
    print(f"{machine()['cpu']}, torch threads {args.threads}; SmolLM2 shape, {T} tokens", flush=True)
    waits = []
    for after in [float(x) for x in args.after.split(",")]:
        session.set_tokens(tok)  # no cache: every layer runs
        waits.append(cancelled_after(lambda c: session.run(is_cancelled=c), after))
        print(f"capture cancelled at {after:.1f} s: stopped {waits[-1] * 1e3:.0f} ms later", flush=True)
    print(f"capture: median {statistics.median(waits) * 1e3:.0f} ms, longest {max(waits) * 1e3:.0f} ms")
    session.set_tokens(tok)
    session.run(logprobs=False)
    mask = np.zeros((session.config.n_layer, session.config.n_head), dtype=bool)
    mask[0, 0] = True
    wait = cancelled_after(lambda c: session.predict(mask, update_cache=False, is_cancelled=c), 2.0)
    print(f"prediction from layer 0 cancelled at 2.0 s: stopped {wait * 1e3:.0f} ms later")
    return 0


if __name__ == "__main__":
    sys.exit(main())
