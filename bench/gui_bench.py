"""Measurement 4 driver: redraw times (gui_probe.py in a subprocess) and launch to the first
drawn trace (`transformer-viewer --prompt ... --screenshot`, offscreen, TV_TIMING=1).

Each part reports "not available" with the reason when the widget, window or bundled model it
needs is not in the tree yet.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HEATMAP_GOAL_S, LAUNCH_GOAL_S = 0.030, 4.0
HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH_PROMPT = "The lighthouse keeper climbed the stairs and looked out over the grey water"


def _missing(*modules_attrs) -> str | None:
    for module, attr in modules_attrs:
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            return f"{module} is not in the tree yet"
        if attr and attr not in open(spec.origin, encoding="utf-8").read():
            return f"{module} has no {attr} yet"
    return None


def redraw(folder: str, lengths, threads: int, reps: int) -> dict:
    why = _missing(("transformer_viewer.viewer.views.heatmap", "def set_data"),
                   ("transformer_viewer.viewer.views.head_grid", "def set_patterns"))
    if why:
        return {"available": False, "reason": why}
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, os.path.join(HERE, "gui_probe.py"), folder, str(threads), str(reps),
                          *map(str, lengths)], capture_output=True, text=True, timeout=900, env=env)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = " / ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
        return {"available": False, "reason": f"gui probe failed (exit {out.returncode}): {tail}"}
    res = json.loads(lines[-1])
    for r in res["rows"]:
        print(f"  redraw T={r['tokens']}: heatmap {r['heatmap']['median_s'] * 1e3:.1f} ms, "
              f"grid {r['grid']['median_s'] * 1e3:.1f} ms, zoom tile {r['zoom_tile']['median_s'] * 1e3:.1f} ms",
              flush=True)
    return {"available": True, "goal_heatmap_s": HEATMAP_GOAL_S, **res}


def _viewer_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "transformer-viewer")
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-c", "import sys; from transformer_viewer.viewer.cli.main import main; sys.exit(main())"]


def launch(checkpoint: str | None, threads: int, runs: int = 1) -> dict:
    """Wall time from spawning the app to its 'first trace drawn' line, and to its exit."""
    why = _missing(("transformer_viewer.viewer.cli.gui", "--screenshot"),
                   ("transformer_viewer.viewer.window.main_window", None))
    if why:
        return {"available": False, "reason": why}
    if checkpoint is None:
        from transformer_viewer.model.checkpoints.checkpoint import bundled_checkpoint_path

        if not os.path.exists(bundled_checkpoint_path()):
            return {"available": False, "reason": "no bundled model (assets/bundled.safetensors) yet"}
    firsts, totals = [], []
    for _ in range(runs):
        shot = os.path.join(tempfile.mkdtemp(prefix="tv-bench-"), "shot.png")
        cmd = _viewer_command() + ([checkpoint] if checkpoint else []) + ["--prompt", LAUNCH_PROMPT,
                                                                           "--device", "cpu", "--screenshot", shot]
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TV_TIMING="1", OMP_NUM_THREADS=str(threads))
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        first = {}

        def read_stderr(proc=proc, first=first, t0=t0):
            for line in proc.stderr:
                if "first trace drawn" in line and "t" not in first:
                    first["t"] = time.perf_counter() - t0
                first.setdefault("lines", []).append(line.rstrip())

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        total = time.perf_counter() - t0
        if proc.returncode != 0 or "t" not in first:
            tail = " / ".join(first.get("lines", [])[-3:])
            return {"available": False, "reason": f"the window did not report a drawn trace (exit {proc.returncode}): {tail}"}
        firsts.append(first["t"])
        totals.append(total)
    first_s = sorted(firsts)[len(firsts) // 2]
    print(f"  launch ({checkpoint or 'bundled'}): first trace drawn after {first_s:.2f} s", flush=True)
    return {"available": True, "checkpoint": checkpoint or "bundled", "first_trace_s": first_s,
            "exit_s": sorted(totals)[len(totals) // 2], "runs": runs, "goal_s": LAUNCH_GOAL_S}
