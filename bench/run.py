"""Benchmarks against Hugging Face transformers and TransformerLens on the same weights.

    .venv/bin/python bench/run.py [--quick] [--out bench/results/latest.json] [--only capture,toggle,...]

Prints a markdown table and writes the JSON. Needs the `bench` extra (transformer-lens,
transformers, psutil). Nothing is downloaded: the model is a random GPT-2-small-shaped
GPT2LMHeadModel saved to a temporary folder, which every tool loads.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time

import capture_bench
import common
import gui_bench
import memory_bench
import psutil
import report
import toggle_bench

LENGTHS = (64, 256, 1024)
PARTS = ("capture", "toggle", "memory", "gui")
FULL = {"capture_reps": {64: 15, 256: 9, 1024: 5}, "toggle_lengths": LENGTHS, "toggle_reps": {64: 15, 256: 9, 1024: 5},
        "warmup": 2, "toggle_run": True, "memory_tools": ("ours", "hf", "tl"), "redraw_reps": 30, "launch_runs": 3}
QUICK = {"capture_reps": {64: 9, 256: 5, 1024: 2}, "toggle_lengths": (256,), "toggle_reps": {256: 5},
         "warmup": 1, "toggle_run": False, "memory_tools": ("ours", "hf"), "redraw_reps": 10, "launch_runs": 1}


def background_cpu(seconds: float = 2.0) -> float:
    """CPU used by every other process over a short window, in % of one core."""
    me = os.getpid()
    procs = [p for p in psutil.process_iter() if p.pid != me]
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.Error:
            pass
    time.sleep(seconds)
    total = 0.0
    for p in procs:
        try:
            total += p.cpu_percent(None)
        except psutil.Error:
            pass
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and lengths; under 3 minutes")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "latest.json"))
    ap.add_argument("--threads", type=int, default=2, help="torch threads for every tool (default 2)")
    ap.add_argument("--only", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    args = ap.parse_args(argv)
    parts = [p for p in args.only.split(",") if p]
    if bad := [p for p in parts if p not in PARTS]:
        ap.error(f"unknown part(s) {', '.join(bad)}; choose from {', '.join(PARTS)}")
    plan = QUICK if args.quick else FULL
    common.set_threads(args.threads)
    t_start = time.perf_counter()
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "quick": args.quick,
           "threads": args.threads, "machine": common.machine(), "versions": common.versions(), "plan": {
               k: (list(v) if isinstance(v, tuple) else {str(a): b for a, b in v.items()} if isinstance(v, dict) else v)
               for k, v in plan.items()}}
    before = background_cpu()
    print(f"other processes use {before:.0f}% of one core; building the model...", flush=True)
    folder = tempfile.mkdtemp(prefix="tv-bench-model-")
    try:
        common.make_hf_folder(folder)
        from transformer_viewer.model.capture.session import Session

        hf, tl = common.load_hf(folder), common.load_tl(folder)
        loaded, res["ours_loader"] = common.load_ours(folder)
        session = Session(loaded)  # what the window keeps: overviews, patterns on demand
        res["agreement"] = common.check_agreement(hf, tl, loaded)
        res["agreement"].update(capture_bench.check_capture(hf, tl, session))
        res["agreement"]["toggle_probs_vs_tl"] = toggle_bench.check_toggle(tl, session, 64, 5)
        print(f"agreement: {res['agreement']}", flush=True)
        between = []  # other processes' CPU use after each part
        if "capture" in parts:
            res["capture"] = capture_bench.measure(hf, tl, session, LENGTHS, plan["capture_reps"], plan["warmup"])
            between.append(background_cpu(1.0))
        if "toggle" in parts:
            res["toggle"] = toggle_bench.measure(tl, session, plan["toggle_lengths"], plan["toggle_reps"],
                                                 plan["warmup"], plan["toggle_run"])
            res["toggle_summary"] = toggle_bench.summarize(res["toggle"])
            between.append(background_cpu(1.0))
        del hf, tl, session, loaded
        if "memory" in parts:
            res["memory"] = memory_bench.measure(folder, 1024, args.threads, plan["memory_tools"])
            between.append(background_cpu(1.0))
        if "gui" in parts:
            res["gui"] = {"redraw": gui_bench.redraw(folder, LENGTHS, args.threads, plan["redraw_reps"]),
                          "launch": gui_bench.launch(None, args.threads, plan["launch_runs"])}
            if not args.quick:
                res["gui"]["launch_bench_model"] = gui_bench.launch(folder, args.threads, 1)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    after = background_cpu()
    res["background"] = {"before": before, "after": after, "between_parts": between,
                         "contended": max([before, after, *between]) > 25.0}
    res["elapsed_s"] = time.perf_counter() - t_start
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print()
    print(report.render(res))
    print(f"\n{res['elapsed_s']:.0f} s in all; JSON in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
