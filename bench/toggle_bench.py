"""Measurement 2, head toggle: from a mask change to the new next-token distribution.

Ours: Session.predict after the mask gains (or loses) one head, with the clean run cached, as
the app does on a click. TransformerLens: run_with_hooks with a zero-ablation hook on that
layer's hook_z, a full forward, then the softmax at the last position. Each of our calls is a
real change (the head goes on, then off, then on...), so none is answered from the cache.
"""

from __future__ import annotations

import numpy as np
import torch
from common import interleaved, prompt_ids, prompt_tokens

GOAL_MEDIAN, GOAL_LAST = 0.5, 0.15
HEAD = 3


def _tl_zero_hook(head: int):
    def hook(z, hook):  # z: (B, T, nh, hs)
        z[:, :, head] = 0.0
        return z
    return hook


def _toggler(session, layer: int, head: int, incremental_run: bool = False):
    L, nh = session.config.n_layer, session.config.n_head
    on = np.zeros((L, nh), dtype=bool)
    on[layer, head] = True
    off = np.zeros((L, nh), dtype=bool)
    state = {"on": False}

    def toggle():
        state["on"] = not state["on"]
        mask = on if state["on"] else off
        return session.run(mask) if incremental_run else session.predict(mask)
    return toggle


def check_toggle(tl, session, T: int, layer: int) -> float:
    """Max |p_ours - p_TL| of the next-token distribution with one head zeroed."""
    ids = prompt_ids(T)
    session.set_tokens(prompt_tokens(T))
    session.run()
    mask = np.zeros((session.config.n_layer, session.config.n_head), dtype=bool)
    mask[layer, HEAD] = True
    ours = session.predict(mask).probs
    with torch.inference_mode():
        logits = tl.run_with_hooks(ids, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", _tl_zero_hook(HEAD))])
    theirs = torch.softmax(logits[0, -1].float(), -1).numpy()
    diff = float(np.abs(ours - theirs).max())
    if not diff <= 1e-5:
        raise SystemExit(f"masked next-token distributions disagree before timing: {diff:.2e}")
    return diff


def measure(tl, session, lengths, reps: dict, warmup: int, with_run: bool) -> list[dict]:
    L = session.config.n_layer
    rows = []
    for T in lengths:
        ids, tok = prompt_ids(T), prompt_tokens(T)
        for layer in (0, L // 2, L - 1):
            session.set_tokens(tok)
            session.run()  # the clean trace the app would be showing

            def tl_toggle(ids=ids, layer=layer):
                with torch.inference_mode():
                    logits = tl.run_with_hooks(ids, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", _tl_zero_hook(HEAD))])
                    torch.softmax(logits[0, -1], -1)

            fns = {"ours": _toggler(session, layer, HEAD), "tl": tl_toggle}
            if with_run:
                fns["ours_run"] = _toggler(session, layer, HEAD, incremental_run=True)
            s = interleaved(fns, reps[T], warmup)
            row = {"tokens": T, "layer": layer, "head": HEAD, "ours": s["ours"].to_dict(), "tl": s["tl"].to_dict(),
                   "ratio_vs_tl": s["ours"].median / s["tl"].median}
            if with_run:
                row["ours_run"] = s["ours_run"].to_dict()
                row["run_ratio_vs_tl"] = s["ours_run"].median / s["tl"].median
            rows.append(row)
            print(f"  toggle T={T} layer {layer}: ours {s['ours'].median * 1e3:.1f} ms, "
                  f"TL {s['tl'].median * 1e3:.0f} ms", flush=True)
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Per length: the median ratio over the three layers and the last layer's."""
    out = []
    for T in sorted({r["tokens"] for r in rows}):
        mine = [r for r in rows if r["tokens"] == T]
        out.append({"tokens": T, "median_ratio": float(np.median([r["ratio_vs_tl"] for r in mine])),
                    "last_layer_ratio": max(mine, key=lambda r: r["layer"])["ratio_vs_tl"],
                    "goal_median": GOAL_MEDIAN, "goal_last": GOAL_LAST})
    return out
