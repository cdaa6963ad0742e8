"""Measurement 3, one tool per fresh process: the peak RSS a full capture adds.

    python bench/memory_probe.py {ours,hf,tl} FOLDER TOKENS THREADS

Loads the model and the ids, resets the kernel's peak-RSS counter (Linux `clear_refs` 5; a
1 ms sampling thread where that is refused), runs one capture holding on to its result, and
prints one JSON line: baseline RSS, peak RSS and the increase, in bytes.
"""

from __future__ import annotations

import gc
import json
import re
import sys
import threading
import time

import common
import psutil
import torch


def _hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)) * 1024
    except (OSError, AttributeError):
        return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.proc, self.peak, self.stop = psutil.Process(), 0, False

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.001)


def main(tool: str, folder: str, T: int, threads: int) -> dict:
    common.set_threads(threads)
    ids = common.prompt_ids(T)
    if tool == "ours":
        from transformer_viewer.model.capture.session import Session

        loaded, _ = common.load_ours(folder)
        session = Session(loaded)
        tok = common.prompt_tokens(T)

        def capture():
            session.set_tokens(tok)
            return session.run()
    elif tool == "hf":
        hf = common.load_hf(folder)

        def capture():
            with torch.inference_mode():
                return hf(ids, output_attentions=True, use_cache=False)
    else:
        tl = common.load_tl(folder)

        def capture():
            with torch.inference_mode():
                return tl.run_with_cache(ids)
    gc.collect()
    proc = psutil.Process()
    base = proc.memory_info().rss
    exact = _reset_hwm() and _hwm() is not None
    sampler = None if exact else Sampler()
    if sampler:
        sampler.start()
    result = capture()
    peak = _hwm() if exact else max(sampler.peak, proc.memory_info().rss)
    if sampler:
        sampler.stop = True
    held = proc.memory_info().rss - base
    del result
    return {"tool": tool, "tokens": T, "baseline_rss": base, "peak_rss": peak, "increase": peak - base,
            "held_after": held, "method": "VmHWM after clear_refs" if exact else "1 ms RSS sampling"}


if __name__ == "__main__":
    tool, folder, T, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(main(tool, folder, T, threads)), flush=True)
