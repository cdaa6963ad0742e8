"""Measurement 1, full capture: our Session.run against HF with attentions and hidden states
and TransformerLens run_with_cache, on the same ids, timed round-robin in one process.

Ours is the capture the window keeps (no full patterns: pooled overviews and per-token
summaries, a head's pattern recomputed on demand), timed twice: with the per-token
log-probabilities (the clean run today) and without them (the views first; the
log-probabilities follow in a second pass)."""

from __future__ import annotations

import numpy as np
import torch
from common import interleaved, prompt_ids, prompt_tokens

GOAL_VS_HF, GOAL_VS_TL = 0.8, 0.6


def check_capture(hf, tl, session, T: int = 64) -> dict:
    """Our on-demand patterns and pooled overviews against both peers' patterns (float16
    overview storage: atol 1e-3)."""
    from transformer_viewer.model.capture.on_demand import head_pattern
    from transformer_viewer.model.capture.overview import pool_pattern

    ids = prompt_ids(T)
    session.set_tokens(prompt_tokens(T))
    trace = session.run()
    L, nh = trace.overview_max.shape[:2]
    with torch.inference_mode():
        hf_att = torch.stack(hf(ids, output_attentions=True, use_cache=False).attentions)[:, 0]  # (L, nh, T, T)
        _, cache = tl.run_with_cache(ids)
        tl_att = torch.stack([cache[f"blocks.{i}.attn.hook_pattern"][0] for i in range(L)])
    ours = np.stack([[head_pattern(session, trace, layer, h) for h in range(nh)] for layer in range(L)])
    overview, _ = pool_pattern(hf_att.numpy())
    diffs = {"pattern_ours_vs_hf": float(np.abs(ours - hf_att.numpy()).max()),
             "pattern_tl_vs_hf": float((tl_att - hf_att).abs().max()),
             "overview_ours_vs_hf": float(np.abs(trace.overview_max.astype(np.float32) - overview).max())}
    if not max(diffs.values()) <= 1e-3:
        raise SystemExit(f"attention patterns disagree before timing: {diffs}")
    return diffs


def measure(hf, tl, session, lengths, reps: dict, warmup: int) -> list[dict]:
    rows = []
    for T in lengths:
        ids, tok = prompt_ids(T), prompt_tokens(T)

        def ours(tok=tok):
            session.set_tokens(tok)  # drops the cache: a full capture, nothing reused
            session.run()

        def ours_views(tok=tok):
            session.set_tokens(tok)
            session.run(logprobs=False)  # what the views wait for; the log-probabilities follow

        def hf_run(ids=ids):
            with torch.inference_mode():
                hf(ids, output_attentions=True, output_hidden_states=True, use_cache=False)

        def tl_run(ids=ids):
            with torch.inference_mode():
                tl.run_with_cache(ids)

        s = interleaved({"ours": ours, "ours_views": ours_views, "hf": hf_run, "tl": tl_run}, reps[T], warmup)
        session.set_tokens(tok)  # frees the last trace before the next length
        rows.append({
            "tokens": T, "ours": s["ours"].to_dict(), "ours_views": s["ours_views"].to_dict(), "hf": s["hf"].to_dict(),
            "tl": s["tl"].to_dict(),
            "ratio_vs_hf": s["ours"].median / s["hf"].median, "ratio_vs_tl": s["ours"].median / s["tl"].median,
            "views_ratio_vs_hf": s["ours_views"].median / s["hf"].median,
            "views_ratio_vs_tl": s["ours_views"].median / s["tl"].median,
            "goal_vs_hf": GOAL_VS_HF, "goal_vs_tl": GOAL_VS_TL,
        })
        print(f"  capture T={T}: ours {s['ours'].median * 1e3:.0f} ms (views first "
              f"{s['ours_views'].median * 1e3:.0f} ms), HF {s['hf'].median * 1e3:.0f} ms, "
              f"TL {s['tl'].median * 1e3:.0f} ms", flush=True)
    return rows
