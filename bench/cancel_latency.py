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
from common import cancelled_after, machine, set_threads
from long_prompts import smol_session


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
