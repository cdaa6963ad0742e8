"""The logit lens at a large vocabulary: what the lens view asks the worker for.

    python bench/lens_bench.py [--tokens 256] [--threads 2] [--repeat 3]

A random model of Qwen2-0.5B's shape (24 layers, 14 heads, 2 KV heads, width 896, MLP 4864,
vocabulary 151,936, tied head); the lens over a window of positions at the end of the prompt.
Timed round-robin in one process (medians), each against its peer in the same run:
- the window the view asks for: by vocabulary alone before (84 positions at this vocabulary),
  by rows x vocabulary x width now (`window_size`);
- the unembedding: one layer's (P, V) logits and log_softmax at a time, reading the whole head
  once per layer (before, `lens_by_rows` here), against every layer's rows through each block of
  the head while it is in cache (model/analysis/lens_unembed.py);
- a head toggle's masked lens: every row unembedded, against the clean lens's rows lent up to
  the masked layer (`logit_lens(..., known=clean, known_rows=l + 1)`);
- the window moved by a click just past its end: the new positions only (the worker keeps the
  columns it had).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

QWEN = dict(n_layer=24, n_head=14, n_kv_head=2, n_embd=896, n_mlp=4864, vocab_size=151936)
WINDOW_BY_VOCABULARY = 256 * 50257 // 151936  # the window the view asked for before: 84


def build_session(T: int):
    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.model.checkpoints.checkpoint import LoadedModel
    from transformer_viewer.model.decoder.config import GPTConfig
    from transformer_viewer.model.decoder.gpt import GPT
    from transformer_viewer.model.kernels.inference import install_inference
    from transformer_viewer.model.tokenizers.tokenizer import Tokenized

    torch.manual_seed(0)
    config = GPTConfig(block_size=max(T, 1024), positional="rotary", norm="rmsnorm", mlp="gated",
                       activation="silu", bias=False, **QWEN)
    model = GPT(config).eval()
    install_inference(model)  # as the app's session does after a load
    session = Session(LoadedModel(model=model, config=config, format="native", source="<bench>", name="qwen-shape"))
    # The ids are random, but the lens must read the whole vocabulary, as with Qwen's own
    # tokenizer (the default one, GPT-2's, would cap it at 50,257 tokens).
    session.n_vocab = config.vocab_size
    ids = np.random.default_rng(0).integers(0, config.vocab_size, T)
    session.set_tokens(Tokenized(ids=tuple(int(i) for i in ids), labels=tuple("t" for _ in ids),
                                 spans=tuple((i, i + 1) for i in range(T)), text="x" * T))
    session.run()
    return session


def lens_by_rows(session, residuals, positions, reference_ids=None):
    """The lens as it was computed before, for comparison: one (P, V) unembedding and
    log_softmax per layer, so the head is read once per row of the lens."""
    model, V, L = session.model, session.n_vocab, session.config.n_layer
    a, b = positions
    top = np.empty((L + 1, b - a), dtype=np.int64)
    cells = []
    with torch.inference_mode():
        for row in [L, *range(L)]:
            logits = model.unembed(residuals[row][0, a:b])[:, :V].float()  # (P, V)
            logprobs = torch.log_softmax(logits, dim=-1)  # (P, V)
            positions_ = torch.arange(logits.shape[0])
            best = logits.argmax(dim=-1)
            top[row] = best.numpy()
            final_idx = torch.as_tensor(top[L])
            final_logit = logits[positions_, final_idx]
            cells.append([logprobs[positions_, best].exp().numpy(), (logits > final_logit[:, None]).sum(dim=-1).numpy(),
                          logprobs[positions_, final_idx].exp().numpy()])
            if reference_ids is not None:
                cells[-1].append(logprobs[positions_, torch.as_tensor(reference_ids[row])].exp().numpy())
    return top, cells


def lens_window_start_after_click(size: int) -> int:
    """How far into the old window the new one starts when the query moves one position past its
    end (lens_window puts the query three quarters of the way in)."""
    from transformer_viewer.viewer.views.lens_view import lens_window

    old = lens_window(10 * size, 5 * size, size)
    new = lens_window(10 * size, old[1], size)
    return new[0] - old[0]


def timed_round_robin(cases: dict, repeat: int) -> dict:
    for fn in cases.values():  # warm-up
        fn()
    times = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformer_viewer.model.analysis.lens import logit_lens
    from transformer_viewer.viewer.views.lens_view import window_size

    T = args.tokens
    t0 = time.perf_counter()
    s = build_session(T)
    print(f"model built and run at {T} tokens in {time.perf_counter() - t0:.1f} s", flush=True)
    L = QWEN["n_layer"]
    new_w = window_size(L + 1, QWEN["vocab_size"], QWEN["n_embd"])
    old = (T - WINDOW_BY_VOCABULARY, T)
    new = (T - new_w, T)
    layer = L // 2
    moved = lens_window_start_after_click(new_w)  # positions a moved window adds
    mask = np.zeros((L, QWEN["n_head"]), dtype=bool)
    mask[layer, 3] = True
    clean_old, clean_new = logit_lens(s, positions=old), logit_lens(s, positions=new)
    res = s.masked_residuals(mask)
    print(f"windows: {WINDOW_BY_VOCABULARY} positions (by vocabulary) -> {new_w} (by cost); "
          f"mask: layer {layer} head 3", flush=True)

    cases = {
        f"clean lens, {WINDOW_BY_VOCABULARY} positions, one layer at a time (before)": lambda: lens_by_rows(
            s, s.residuals(), old),
        f"clean lens, {new_w} positions, one layer at a time": lambda: lens_by_rows(s, s.residuals(), new),
        f"clean lens, {new_w} positions, every layer per head block (now)": lambda: logit_lens(s, positions=new),
        f"masked lens, {WINDOW_BY_VOCABULARY} positions, one layer at a time (before)": lambda: lens_by_rows(
            s, res, old, clean_old.top_ids),
        f"masked lens, {new_w} positions, every row, every layer per head block": lambda: logit_lens(
            s, res, reference_ids=clean_new.top_ids, positions=new),
        f"masked lens, {new_w} positions, clean rows 0..{layer} lent (now)": lambda: logit_lens(
            s, res, reference_ids=clean_new.top_ids, positions=new, known=clean_new, known_rows=layer + 1),
        # a click just past the window's end moves it by a quarter: only those positions are new
        f"clean lens of a window moved by a quarter: its {moved} new positions (now)": lambda: logit_lens(
            s, positions=(T - moved, T)),
    }
    got = timed_round_robin(cases, args.repeat)
    print(f"\n{platform.processor() or platform.machine()}, torch {torch.__version__}, threads {args.threads}, "
          f"load average {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}")
    print("| case | median |\n|---|---:|")
    for name, sec in got.items():
        print(f"| {name} | {sec * 1000:,.0f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
