"""The head scan on a model of SmolLM2-135M's shape: every head ablated in turn, one layer's
heads as one batch (`head_scan`), against the same predictions made one head at a time.

    python bench/scan_bench.py [--threads 2] [--lengths 64,256]

A random Llama-architecture model (30 layers, 9 heads, 3 key/value heads, width 576, MLP 1536,
vocabulary 49,152) saved with save_pretrained and read by our loader, as family_bench.py.
float32, CPU; both ways timed in one process, alternating, and checked to agree.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import numpy as np
from common import machine, set_threads
from family_bench import load_ours, make_folder, tokens


def one_at_a_time(session, position: int) -> np.ndarray:
    """p(top token) with each head ablated, one `predict` per head: the scan before batching."""
    L, nh = session.config.n_layer, session.config.n_head
    top = int(session.predict(None, "zero", position, top_k=1, update_cache=False).top_ids[0])
    out = np.zeros((L, nh), dtype=np.float32)
    for layer in range(L):
        for head in range(nh):
            mask = np.zeros((L, nh), dtype=bool)
            mask[layer, head] = True
            out[layer, head] = session.predict(mask, "zero", position, top_k=1, update_cache=False).probs[top]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", default="64,256", help="prompt lengths, comma-separated")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of both ways")
    args = ap.parse_args()
    set_threads(args.threads)
    from transformer_viewer.model.analysis.scan import head_scan
    from transformer_viewer.model.capture.session import Session

    with tempfile.TemporaryDirectory() as folder:
        make_folder(folder)
        loaded = load_ours(folder)
    session = Session(loaded)
    L, nh = loaded.config.n_layer, loaded.config.n_head
    print(f"{machine()['cpu']}, torch threads {args.threads}; {L} x {nh} = {L * nh} heads")
    print("| tokens | one head at a time | a layer's heads together | ratio |\n|---:|---:|---:|---:|")
    for T in (int(x) for x in args.lengths.split(",")):
        session.set_tokens(tokens(T))
        session.run()
        times = {"single": [], "batched": []}
        for _ in range(args.rounds):
            t = time.perf_counter()
            single = one_at_a_time(session, T - 1)
            times["single"].append(time.perf_counter() - t)
            t = time.perf_counter()
            batched = head_scan(session, position=T - 1)
            times["batched"].append(time.perf_counter() - t)
        np.testing.assert_allclose(batched.target_probs, single, rtol=1e-4, atol=1e-7)
        a, b = min(times["single"]), min(times["batched"])
        print(f"| {T} | {a:.1f} s ({a / (L * nh) * 1e3:.0f} ms a head) | {b:.1f} s ({b / (L * nh) * 1e3:.0f} ms a head) "
              f"| {b / a:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
