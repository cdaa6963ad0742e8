"""The markdown tables `run.py` prints (and BENCHMARKS.md quotes) from the results dict."""

from __future__ import annotations


def _ms(d: dict | None) -> str:
    return "-" if d is None else f"{d['median_s'] * 1e3:,.1f}" if d["median_s"] < 1 else f"{d['median_s'] * 1e3:,.0f}"


def _verdict(value: float, goal: float) -> str:
    return f"**{value:.2f}x** (goal <= {goal:g}x, {'met' if value <= goal else 'MISSED'})"


def _mib(b: int) -> str:
    return f"{b / 2**20:,.0f} MiB"


def render(res: dict) -> str:
    m, v = res["machine"], res["versions"]
    out = [
        f"Run {res['date']} ({'quick' if res['quick'] else 'full'} mode), {m['cpu']}, {m['cores']} cores, "
        f"torch threads {res['threads']}, float32, CPU.",
        f"torch {v['torch']}, transformers {v['transformers']}, transformer-lens {v['transformer-lens']}, "
        f"numpy {v['numpy']}, PySide6 {v['PySide6-Essentials']}, pyqtgraph {v['pyqtgraph']}, Python {m['python']}.",
        f"Model: random GPT-2-small shape (12 x 12 heads x 768, vocab 50257), loaded by each tool from one "
        f"save_pretrained folder (ours via {res['ours_loader']}). Max |logit diff| vs HF: ours "
        f"{res['agreement']['ours_vs_hf']:.1e}, TL {res['agreement']['tl_vs_hf']:.1e}.",
        f"Other processes' CPU use: {res['background']['before']:.0f}% of one core before, "
        f"{', '.join(f'{x:.0f}%' for x in res['background'].get('between_parts', []))} between parts, "
        f"{res['background']['after']:.0f}% after"
        f"{' (CONTENDED: numbers are noisier and slower)' if res['background']['contended'] else ''}.",
        "",
    ]
    if "capture" in res:
        out += ["### 1. Full capture (median ms; ratios are ours / peer in the same run)", "",
                "The goals judge the capture the window waits for before it draws (views first); the ratios "
                "of the whole capture, every token's log-probability included, are shown beside them.", "",
                "| tokens | ours Session.run | ours, views first (no log-probs) | HF eager, attentions + hidden states "
                "| TL run_with_cache | ours / HF | ours / TL | views first / HF | views first / TL |",
                "|---:|---:|---:|---:|---:|---|---|---|---|"]
        for r in res["capture"]:
            views = r.get("ours_views")
            whole = (f"{r['ratio_vs_hf']:.2f}x | {r['ratio_vs_tl']:.2f}x" if views else  # judged by views first
                     f"{_verdict(r['ratio_vs_hf'], r['goal_vs_hf'])} | {_verdict(r['ratio_vs_tl'], r['goal_vs_tl'])}")
            out.append(f"| {r['tokens']} | {_ms(r['ours'])} | {_ms(views)} | {_ms(r['hf'])} | {_ms(r['tl'])} | "
                       f"{whole} | "
                       + (f"{_verdict(r['views_ratio_vs_hf'], r['goal_vs_hf'])} | "
                          f"{_verdict(r['views_ratio_vs_tl'], r['goal_vs_tl'])} |" if views else "- | - |"))
        out.append("")
    if "toggle" in res:
        with_run = any("ours_run" in r for r in res["toggle"])
        head = "| tokens | layer | ours Session.predict | TL run_with_hooks (zero hook_z) | ours / TL |"
        rule = "|---:|---:|---:|---:|---:|"
        if with_run:
            head += " ours Session.run (incremental capture) | run / TL |"
            rule += "---:|---:|"
        out += ["### 2. Head toggle: mask change to new next-token distribution (median ms)", "", head, rule]
        for r in res["toggle"]:
            line = f"| {r['tokens']} | {r['layer']} | {_ms(r['ours'])} | {_ms(r['tl'])} | {r['ratio_vs_tl']:.3f}x |"
            if with_run:
                line += f" {_ms(r.get('ours_run'))} | {r.get('run_ratio_vs_tl', float('nan')):.2f}x |"
            out.append(line)
        out.append("")
        for s in res["toggle_summary"]:
            out.append(f"- {s['tokens']} tokens: median over layers {_verdict(s['median_ratio'], s['goal_median'])}; "
                       f"last layer {_verdict(s['last_layer_ratio'], s['goal_last'])}")
        out.append("")
    if "memory" in res:
        r = res["memory"]
        tl = r.get("tl")
        out += [f"### 3. Memory: peak RSS increase of one capture at {r['tokens']} tokens (fresh process each; "
                f"{r['ours']['method']})", "",
                "| ours Session.run (overviews float16) | HF output_attentions=True | TL run_with_cache | ours / HF |",
                "|---:|---:|---:|---|",
                f"| {_mib(r['ours']['increase'])} | {_mib(r['hf']['increase'])} | "
                f"{_mib(tl['increase']) if tl else '-'} | {_verdict(r['ratio_vs_hf'], r['goal_vs_hf'])} |", ""]
    if "gui" in res:
        g = res["gui"]
        out += ["### 4. GUI (offscreen)", ""]
        rd = g["redraw"]
        if not rd["available"]:
            out += [f"- redraw: not available ({rd['reason']})"]
        else:
            out += ["| tokens | heatmap redraw, overview (set_data + repaint) | heads grid redraw, overviews "
                    "(set_patterns + repaint) | zoom: 256 x 256 tile on demand + redraw |",
                    "|---:|---:|---:|---:|"]
            for r in rd["rows"]:
                zoom = r.get("zoom_tile")
                out.append(f"| {r['tokens']} | {_ms(r['heatmap'])} ms (cpu {r['heatmap']['cpu_median_s'] * 1e3:.1f}) | "
                           f"{_ms(r['grid'])} ms (cpu {r['grid']['cpu_median_s'] * 1e3:.1f}) | "
                           + (f"{_ms(zoom)} ms (cpu {zoom['cpu_median_s'] * 1e3:.1f}) |" if zoom else "- |"))
            big = max(rd["rows"], key=lambda r: r["tokens"])
            ms, goal = big["heatmap"]["median_s"] * 1e3, rd["goal_heatmap_s"] * 1e3
            out += ["", f"- heatmap at {big['tokens']} tokens: {ms:.1f} ms median (goal <= {goal:g} ms, "
                        f"{'met' if ms <= goal else 'MISSED'})"]
        for key, what in (("launch", "launch to first drawn heatmap, bundled model"),
                          ("launch_bench_model", "launch to first drawn heatmap, the 124M bench model (information)")):
            la = g.get(key)
            if la is None:
                continue
            if not la["available"]:
                out.append(f"- {what}: not available ({la['reason']})")
            else:
                goal = f" (goal <= {la['goal_s']:g} s, {'met' if la['first_trace_s'] <= la['goal_s'] else 'MISSED'})" \
                    if key == "launch" else ""
                out.append(f"- {what}: {la['first_trace_s']:.2f} s median of {la['runs']}{goal}; "
                           f"process exit after the screenshot {la['exit_s']:.2f} s")
        out.append("")
    return "\n".join(out)
