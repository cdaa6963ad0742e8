"""Measurement 3 driver: each tool's capture in its own fresh process, for a clean RSS baseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

GOAL = 0.15  # GPT-2-small at 1,024 tokens: our capture's peak RSS increase against Hugging Face's
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memory_probe.py")


def probe(tool: str, folder: str, T: int, threads: int) -> dict:
    out = subprocess.run([sys.executable, PROBE, tool, folder, str(T), str(threads)], capture_output=True,
                         text=True, timeout=900)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"memory probe for {tool} failed (exit {out.returncode}): {' / '.join(tail)}")
    return json.loads(lines[-1])


def measure(folder: str, T: int, threads: int, tools=("ours", "hf", "tl")) -> dict:
    res = {tool: probe(tool, folder, T, threads) for tool in tools}
    row = {"tokens": T, **res, "ratio_vs_hf": res["ours"]["increase"] / res["hf"]["increase"], "goal_vs_hf": GOAL}
    if "tl" in res:
        row["ratio_vs_tl"] = res["ours"]["increase"] / res["tl"]["increase"]
    mib = {k: f"{v['increase'] / 2**20:.0f} MiB" for k, v in res.items()}
    print(f"  memory T={T}: {mib}", flush=True)
    return row
