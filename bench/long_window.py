"""An 8,192-token prompt end to end in the offscreen window, on the CPU.

    python bench/long_window.py [--tokens 8192] [--threads 2] [--layer 27 --head 4]

A random model of SmolLM2-135M's shape (Llama architecture: 30 layers, 9 heads, 3 KV heads,
width 576, MLP 1536, vocabulary 49,152, context 8,192) is saved as a checkpoint and opened in
the MainWindow as a user would, with GPT-2's tokenizer. Then, one step at a time, each waited
for until the worker is idle and what it asked for is drawn:

1. load the checkpoint;
2. enter the prompt (ordinary English repeated to exactly `--tokens` tokens) and wait for
   the trace and every view;
3. zoom the attention heatmap to 512 x 512 tokens and wait for the full-resolution tile;
4. toggle a head and wait for the new trace.

For each step: wall time, CPU time of the process (all threads), the longest stall of the GUI thread (the longest gap between the
ticks of a 5 ms timer, less the 5 ms) and the peak RSS increase over the process's RSS with the
model loaded (VmHWM after clear_refs, as memory_probe.py).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TRANSFORMER_VIEWER_NO_DIALOGS", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
import memory_probe  # noqa: E402

SMOL = dict(n_layer=30, n_head=9, n_kv_head=3, n_embd=576, n_mlp=1536, vocab_size=49152)
PROSE = (
    "The history of the lighthouse on the northern cape begins with a wooden tower built by the "
    "fishermen of the village, who had lost three boats in a single winter to the rocks below the "
    "cliff. When the tower burned down forty years later, the harbour board paid for a stone one, "
    "and a family of keepers lived in it until the light was automated. "
)
TICK_MS = 5


def save_model(folder: str, T: int) -> str:
    import torch

    from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
    from transformer_viewer.model.decoder.config import GPTConfig
    from transformer_viewer.model.decoder.gpt import GPT

    torch.manual_seed(0)
    config = GPTConfig(block_size=T, positional="rotary", norm="rmsnorm", mlp="gated", activation="silu",
                       bias=False, **SMOL)
    path = os.path.join(folder, "smol-shape.safetensors")
    save_checkpoint(GPT(config).eval(), path)
    return path


def prompt_of(T: int) -> str:
    """English text of exactly T GPT-2 tokens (every id inside the model's vocabulary)."""
    from transformer_viewer.model.tokenizers.tokenizer_loading import load_tokenizer

    tok = load_tokenizer("gpt2")
    words = (PROSE * (T // 40 + 2)).split(" ")

    def n(k: int) -> int:
        return len(tok.encode(" ".join(words[:k])))

    lo, hi = 1, len(words)
    while lo < hi:  # the most words that stay within T tokens
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if n(mid) <= T else (lo, mid - 1)
    text = " ".join(words[:lo])
    while len(tok.encode(text)) < T:
        text += " a"
    ids = tok.encode(text)
    if len(ids) != T or max(ids) >= SMOL["vocab_size"]:
        raise SystemExit(f"could not make a prompt of {T} tokens inside the vocabulary ({len(ids)}, max id {max(ids)})")
    return text


class StallMeter:
    """The longest gap between ticks of a TICK_MS timer on the GUI thread since `reset`."""

    def __init__(self):
        from PySide6 import QtCore

        self.timer = QtCore.QTimer()
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self._tick)
        self.reset()
        self.timer.start()

    def reset(self) -> None:
        self.last, self.longest = time.perf_counter(), 0.0

    def _tick(self) -> None:
        now = time.perf_counter()
        self.longest = max(self.longest, now - self.last - TICK_MS / 1000)
        self.last = now


def wait_for(app, condition, timeout_s: float) -> None:
    from PySide6 import QtCore

    loop = QtCore.QEventLoop()
    poll = QtCore.QTimer()
    poll.setInterval(10)
    poll.timeout.connect(lambda: loop.quit() if condition() else None)
    poll.start()
    deadline = QtCore.QTimer()
    deadline.setSingleShot(True)
    deadline.timeout.connect(loop.quit)
    deadline.start(int(timeout_s * 1000))
    loop.exec()
    poll.stop()
    if not condition():
        raise SystemExit(f"timed out after {timeout_s:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layer", type=int, default=27)
    ap.add_argument("--head", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    import numpy as np
    import torch
    from PySide6 import QtCore, QtWidgets

    torch.set_num_threads(args.threads)
    T = args.tokens
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    from transformer_viewer.viewer.window.main_window import MainWindow

    with tempfile.TemporaryDirectory() as folder:
        path = save_model(folder, T)
        text = prompt_of(T)
        settings = QtCore.QSettings(os.path.join(folder, "settings.ini"), QtCore.QSettings.IniFormat)
        window = MainWindow(settings=settings, debounce_ms=30)
        window.resize(1600, 1000)
        window.show()
        app.processEvents()
        meter = StallMeter()
        rows = []

        def step(name, act, done):
            import gc

            gc.collect()
            memory_probe._reset_hwm()
            meter.reset()
            t0, c0 = time.perf_counter(), time.process_time()
            act()
            wait_for(app, lambda: not window.worker.busy and done(), args.timeout)
            app.processEvents()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rows.append((name, wall, cpu, meter.longest, memory_probe._hwm() - base))
            print(f"{name}: {wall:.2f} s ({cpu:.1f} CPU s), longest GUI stall {meter.longest * 1000:.0f} ms, "
                  f"peak RSS increase {(memory_probe._hwm() - base) / 2**20:,.0f} MiB", flush=True)

        base = memory_probe.psutil.Process().memory_info().rss
        step("load the checkpoint", lambda: window.load(path, device="cpu"),
             lambda: window.state.model_info is not None)
        import gc

        gc.collect()
        base = memory_probe.psutil.Process().memory_info().rss  # increases from here: the model loaded
        step(f"enter a {T:,}-token prompt, trace and views drawn", lambda: window.state.set_prompt(text),
             lambda: window.state.trace is not None and window.state.trace.n_tokens == T)
        hm = window.attention.heatmap
        r0 = T // 2
        step("zoom the heatmap to 512 x 512 tokens, full-resolution tile drawn",
             lambda: hm.set_visible_tokens((r0, r0 + 512), (r0 - 256, r0 + 256)), lambda: hm.tile() is not None)
        layer, head = args.layer, args.head
        step(f"toggle head {layer}.{head}, new trace drawn", lambda: window.state.toggle_head(layer, head),
             lambda: window.state.trace is not None and bool(window.state.trace.mask[layer, head]))
        shots = os.environ.get("LONG_WINDOW_SCREENSHOT")
        if shots:
            window.grab().save(shots)
        peak_total = max(r[4] for r in rows[1:])
        window.close()
    cpu = common.machine()["cpu"]
    print(f"\n{cpu}, {os.cpu_count()} CPUs, torch threads {args.threads}, load average "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; torch {torch.__version__}, numpy {np.__version__}, "
          f"Python {platform.python_version()}")
    print("| step | wall | CPU (all threads) | longest GUI-thread stall | peak RSS increase over the loaded model |\n"
          "|---|---:|---:|---:|---:|")
    for name, wall, cpu, stall, inc in rows:
        print(f"| {name} | {wall:.2f} s | {cpu:.1f} s | {stall * 1000:,.0f} ms | {inc / 2**20:,.0f} MiB |")
    print(f"\npeak RSS increase over all steps after loading: {peak_total / 2**20:,.0f} MiB (goal <= 3 GB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
