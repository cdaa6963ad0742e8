"""Where the prediction comes from, timed against one capture: the complete direct logit
attribution, the information-flow routes from the last position and one attention-rollout row.

    python bench/attribution_bench.py [--tokens 4096,8192] [--threads 2] [--skip-bundled]

Each length runs in a fresh process on a random model of SmolLM2-135M's shape (as
`long_prompts.py` builds it): a capture (`Session.run`, what the window does first), then each
analysis from that session's cache, each timed and with the peak resident memory it adds
(VmHWM after `clear_refs`, less the resident size before it). Random weights spread attention
evenly, so almost no route passes the threshold there; the bundled model (trained, 128 tokens of
context) is measured on a real sentence too, where routes do. Goals: routes from one position
<= 2x one capture and <= 1.5 GB at 4,096 tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED_PROMPT = ("When Mary and John went to the store, John gave a drink to Mary. "
                  "The cat sat on the mat. The cat sat on the")


def _measure(fn):
    import gc

    import memory_probe

    gc.collect()
    base = memory_probe.psutil.Process().memory_info().rss
    memory_probe._reset_hwm()
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    return out, seconds, max(0, (memory_probe._hwm() or base) - base)


def probe(T: int, threads: int, bundled: bool) -> dict:
    import torch

    torch.set_num_threads(threads)
    from transformer_viewer.model.analysis.logit_attribution import logit_attribution
    from transformer_viewer.model.analysis.rollout import rollout_rows
    from transformer_viewer.model.analysis.routes import information_routes

    if bundled:
        from transformer_viewer.model.capture.session import Session
        from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
        from transformer_viewer.model.kernels.inference import install_inference

        loaded = load_checkpoint(None, device="cpu")
        install_inference(loaded.model)
        session = Session(loaded)
        session.set_prompt(BUNDLED_PROMPT)
        T = len(session.tokens.ids)
    else:
        from long_prompts import smol_session

        session = smol_session(T)
    out = {"model": "bundled" if bundled else "smollm2-shape (random)", "tokens": T}
    _, out["capture_s"], out["capture_bytes"] = _measure(session.run)
    _, out["dla_s"], out["dla_bytes"] = _measure(lambda: logit_attribution(session))
    routes, out["routes_s"], out["routes_bytes"] = _measure(lambda: information_routes(session))
    out["routes_expanded"], out["routes_edges"] = routes.expanded, len(routes.edges)
    _, out["rollout_row_s"], out["rollout_row_bytes"] = _measure(lambda: rollout_rows(session, T - 1, T))
    return out


def _child(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, cwd=HERE)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="4096,8192")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-bundled", action="store_true")
    ap.add_argument("--child", nargs=3, metavar=("T", "THREADS", "BUNDLED"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.path.insert(0, HERE)
        T, threads, bundled = int(args.child[0]), int(args.child[1]), args.child[2] == "1"
        print(json.dumps(probe(T, threads, bundled)))
        return
    sys.path.insert(0, HERE)
    from common import machine

    rows = []
    if not args.skip_bundled:
        rows.append(_child(["0", str(args.threads), "1"]))
    for T in (int(t) for t in args.tokens.split(",")):
        rows.append(_child([str(T), str(args.threads), "0"]))
    print(json.dumps({"machine": machine(), "threads": args.threads}, indent=1))
    print("| model | tokens | capture | DLA | routes (expanded) | rollout row | routes / capture | routes peak |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| error: {r['error']} |")
            continue
        print(f"| {r['model']} | {r['tokens']:,} | {r['capture_s']:.2f} s | {r['dla_s']:.2f} s | "
              f"{r['routes_s']:.2f} s ({r['routes_expanded']}) | {r['rollout_row_s']:.2f} s | "
              f"{r['routes_s'] / r['capture_s']:.2f}x | {r['routes_bytes'] / 2**30:.2f} GiB |")


if __name__ == "__main__":
    main()
