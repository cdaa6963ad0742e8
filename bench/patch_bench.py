"""Activation patching against TransformerLens 4.3 and nnsight, in one process on one machine.

    python bench/patch_bench.py [--threads 2] [--reps 3] [--out bench/results/patching.json]

Needs the `bench-patching` extra (TransformerLens 4.3, nnsight, psutil), best in a virtual
environment of its own: TransformerLens 4 pins its own transformers. Nothing is downloaded.

1. GPT-2-small's shape, random weights saved once with `save_pretrained` into a temporary folder
   that every tool loads (ours through `load_checkpoint`, TransformerLens through
   `TransformerBridge.boot_transformers`, which keeps the weights as they are: no folded norms,
   no centring; its compatibility mode, which processes them, stays off). 64 tokens, a
   corrupted prompt with three tokens changed, the metric logit(A) - logit(B) at the last
   position. Every head's output patched over all positions (144 runs) against
   `patching.get_act_patch_attn_head_out_all_pos`, and resid_pre by layer x position against
   `patching.get_act_patch_resid_pre`. Each side's time includes its clean cache: ours the
   session's patch sources (both runs), TransformerLens's `run_with_cache` of the clean prompt.
   Our grids are checked equal to TransformerLens's within the float32 rule of
   tests/helpers/tolerances.py.
2. SmolLM2-135M's shape (a LlamaForCausalLM, random weights, bench/family_bench.py's folder) at
   256 tokens: every head's output patched (270 runs) against the same runs written with nnsight
   (a trace of the clean prompt saving each o_proj input, then one trace per head writing that
   head's slice of it into the corrupted run), checked equal.
3. On the same model and prompt: attribution patching of every head at every position
   (`estimate_grid`, "heads-by-pos", its patch sources included; and again with them cached, as
   after an exact grid) against one capture (`Session.run`).

Medians of `--reps` runs after `--warmup` untimed ones, the tools of each comparison timed
round-robin; the results of the last timed runs are the ones checked equal, and their memory is
the one reported: the peak resident size during the call after resetting it (`clear_refs`), less
the resident size before it, in this process. The time is wall time and this process's CPU time;
on a loaded machine the CPU times compare better.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile

os.environ.setdefault("TQDM_DISABLE", "1")  # TransformerLens's sweeps print a bar per call

import common  # noqa: E402 (sets the offline environment before transformers loads)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from memory_probe import _hwm, _reset_hwm  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests.helpers.tolerances
from tests.helpers.tolerances import float32_atol  # noqa: E402

GPT2_TOKENS, SMOLLM_TOKENS = 64, 256
GOAL_TL, GOAL_NNSIGHT, AIM_ESTIMATE = 0.5, 0.5, 3.0


def corrupt(ids: list[int], positions, vocab: int) -> list[int]:
    """The ids with the tokens at `positions` replaced by others (seeded)."""
    g = torch.Generator().manual_seed(1)
    out = list(ids)
    for p in positions:
        out[p] = (out[p] + 1 + int(torch.randint(0, vocab - 1, (1,), generator=g))) % vocab
    return out


def tokenized(ids):
    from transformer_viewer.model.tokenizers.tokenizer import Tokenized

    ids = tuple(int(i) for i in ids)
    return Tokenized(ids, tuple(f"t{i}" for i in range(len(ids))), tuple((i, i + 1) for i in range(len(ids))),
                     "t" * len(ids))


def measured(fn, memory: dict, key: str):
    """`fn` recording in memory[key] the bytes of resident memory its last call added at its peak
    (None where the counter cannot be reset): measured in the timed runs themselves, since the
    peers' runs take minutes."""
    def call():
        gc.collect()
        reset = _reset_hwm()
        before = _hwm()
        result = fn()
        memory[key] = _hwm() - before if reset else None
        return result
    return call


def metric_atol(config, logit_scale: float) -> float:
    """A logit difference after every layer: twice a logit's float32 bound."""
    return 2 * float32_atol(max(config.n_embd, config.n_mlp), config.n_layer + 1, logit_scale)


def gpt2_part(folder: str, reps: int, warmup: int, kinds=("heads", "resid"), resid_every: int = 1) -> dict:
    import pandas as pd
    from transformer_lens import patching

    from transformer_viewer.model.analysis.patching.exact import patch_grid
    from transformer_viewer.model.analysis.patching.metric import PatchMetric
    from transformer_viewer.model.capture.session import Session

    loaded, _ = common.load_ours(folder)
    tl = common.load_tl(folder)
    session = Session(loaded)
    T = GPT2_TOKENS
    clean_ids = common.prompt_ids(T)  # (1, T)
    corrupted_list = corrupt(clean_ids[0].tolist(), (5, 21, 40), common.VOCAB)
    corrupted_ids = torch.tensor([corrupted_list])
    session.set_tokens(tokenized(clean_ids[0].tolist()))
    corrupted_tok = tokenized(corrupted_list)
    session.set_corrupted_tokens(corrupted_tok)
    a, b = int(clean_ids[0, -1]), int(clean_ids[0, -2])
    metric = PatchMetric.make("logit-diff", (a, b))

    def tl_metric(logits):
        return logits[0, -1, a] - logits[0, -1, b]

    # resid_pre at every layer and every `resid_every`-th position (1: the whole grid): each of
    # TransformerLens's cells is a full forward, minutes on a loaded machine.
    resid_cells = [(layer, p) for layer in range(loaded.config.n_layer) for p in range(0, T, resid_every)]

    def ours(what):
        session.set_corrupted_tokens(corrupted_tok)  # drops the patch sources: both runs again
        if what == "resid":
            grid = patch_grid(session, what, metric, cells=resid_cells)
            return np.array([grid.raw[c] for c in resid_cells])
        return patch_grid(session, what, metric).raw

    def theirs(what):
        with torch.inference_mode():
            _, cache = tl.run_with_cache(clean_ids)
            if what == "heads":
                return patching.get_act_patch_attn_head_out_all_pos(tl, corrupted_ids, cache, tl_metric).cpu().numpy()
            index = pd.DataFrame(resid_cells, columns=["layer", "pos"])
            return patching.get_act_patch_resid_pre(tl, corrupted_ids, cache, tl_metric, index_axis_names=None,
                                                    index_df=index).cpu().numpy()

    with torch.inference_mode():
        logit_scale = float(tl(clean_ids)[0].abs().max())
    atol = metric_atol(loaded.config, logit_scale)
    out = {"tokens": T, "atol": atol}
    out["resid_cells"] = len(resid_cells)
    for what in kinds:
        last, memory = {}, {}
        s = common.interleaved({
            "ours": measured(lambda w=what, last=last: last.__setitem__("ours", ours(w)), memory, "ours"),
            "tl": measured(lambda w=what, last=last: last.__setitem__("tl", theirs(w)), memory, "tl"),
        }, reps, warmup)
        mine, ref = last["ours"], last["tl"]
        diff = float(np.abs(mine - ref).max())
        if not diff <= atol:
            raise SystemExit(f"{what}: ours differs from TransformerLens by {diff:.3g}, over {atol:.3g}")
        out[what] = {"ours": s["ours"].to_dict(), "tl": s["tl"].to_dict(),
                     "ratio": s["ours"].median / s["tl"].median,
                     "pair_ratios": common.paired_ratios(s["ours"], s["tl"]),
                     "max_diff": diff, "effect": float(np.abs(ref - ref.min()).max()),
                     "cpu_ratio": s["ours"].cpu_median / s["tl"].cpu_median, "memory": memory}
        cells = f" ({len(resid_cells)} cells)" if what == "resid" else ""
        print(f"GPT-2-small, {T} tokens, {what}{cells}: equal to TransformerLens's within {diff:.2g} (bound {atol:.2g}); "
              f"ours {s['ours'].median:.2f} s, TL {s['tl'].median:.2f} s, {out[what]['ratio']:.2f}x "
              f"(CPU {s['ours'].cpu_median:.1f} / {s['tl'].cpu_median:.1f} s, {out[what]['cpu_ratio']:.2f}x) "
              f"(goal <= {GOAL_TL}x); memory added {mib(out[what]['memory']['ours'])} / "
              f"{mib(out[what]['memory']['tl'])} MiB", flush=True)
    return out


def smollm_part(folder: str, reps: int, warmup: int) -> dict:
    import family_bench
    from nnsight import NNsight

    from transformer_viewer.model.analysis.patching.attribution_patching import estimate_grid
    from transformer_viewer.model.analysis.patching.exact import patch_grid
    from transformer_viewer.model.analysis.patching.metric import PatchMetric
    from transformer_viewer.model.capture.session import Session

    hf = family_bench.make_folder(folder)
    loaded = family_bench.load_ours(folder)
    config = loaded.config
    L, nh, hs = config.n_layer, config.n_head, config.head_size
    session = Session(loaded)
    T = SMOLLM_TOKENS
    clean_tok = family_bench.tokens(T)
    corrupted_list = corrupt(list(clean_tok.ids), (7, 100, 200), config.vocab_size)
    corrupted_tok = tokenized(corrupted_list)
    clean_ids, corrupted_ids = torch.tensor([clean_tok.ids]), torch.tensor([corrupted_list])
    session.set_tokens(clean_tok)
    session.set_corrupted_tokens(corrupted_tok)
    a, b = int(clean_ids[0, -1]), int(clean_ids[0, -2])
    metric = PatchMetric.make("logit-diff", (a, b))
    nn_model = NNsight(hf)

    def ours():
        session.set_corrupted_tokens(corrupted_tok)
        return patch_grid(session, "heads", metric)

    def theirs():
        # Values leave a trace through objects made before it (a trace runs its block apart from
        # the function's locals).
        out = np.zeros((L, nh), dtype=np.float32)
        zs, box = [], []
        with torch.inference_mode():
            with nn_model.trace(clean_ids):
                for layer in range(L):
                    zs.append(nn_model.model.layers[layer].self_attn.o_proj.input.save())
            for layer in range(L):
                for h in range(nh):
                    cols = slice(h * hs, (h + 1) * hs)
                    with nn_model.trace(corrupted_ids):
                        nn_model.model.layers[layer].self_attn.o_proj.input[:, :, cols] = zs[layer][:, :, cols]
                        box.append(nn_model.lm_head.output.save())
                    logits = box.pop()
                    out[layer, h] = float(logits[0, -1, a] - logits[0, -1, b])
        return out

    def estimate():
        session.set_corrupted_tokens(corrupted_tok)
        return estimate_grid(session, "heads-by-pos", metric)

    def capture():
        session.set_tokens(clean_tok)  # drops every cache: a full capture
        session.run()

    def estimate_cached():
        return estimate_grid(session, "heads-by-pos", metric)  # the patch sources of the last call kept

    memory = {}
    s = common.interleaved({"estimate": measured(estimate, memory, "estimate"),
                            "estimate_cached": measured(estimate_cached, memory, "estimate_cached"),
                            "capture": measured(capture, memory, "capture")}, reps, warmup)
    session.set_tokens(clean_tok)
    out = {"tokens": T}
    out["estimate"] = {"estimate": s["estimate"].to_dict(), "estimate_cached": s["estimate_cached"].to_dict(),
                       "capture": s["capture"].to_dict(), "ratio": s["estimate"].median / s["capture"].median,
                       "cached_ratio": s["estimate_cached"].median / s["capture"].median,
                       "cpu_ratio": s["estimate"].cpu_median / s["capture"].cpu_median, "memory": memory}
    e = out["estimate"]
    print(f"SmolLM2-135M's shape, {T} tokens, attribution patching of every head x position: {s['estimate'].median:.2f} s, with the patch "
          f"sources cached {s['estimate_cached'].median:.2f} s, one capture {s['capture'].median:.2f} s: "
          f"{e['ratio']:.2f}x, cached {e['cached_ratio']:.2f}x (CPU {e['cpu_ratio']:.2f}x; aim <= {AIM_ESTIMATE}x); "
          f"memory added "
          f"{mib(e['memory']['estimate'])} / {mib(e['memory']['capture'])} MiB", flush=True)

    with torch.inference_mode():
        logit_scale = float(hf(clean_ids).logits.abs().max())
    atol = metric_atol(config, logit_scale)
    last, memory = {}, {}
    s = common.interleaved({"ours": measured(lambda: last.__setitem__("ours", ours().raw), memory, "ours"),
                            "nnsight": measured(lambda: last.__setitem__("nnsight", theirs()), memory, "nnsight")},
                           reps, warmup)
    diff = float(np.abs(last["ours"] - last["nnsight"]).max())
    if not diff <= atol:
        raise SystemExit(f"SmolLM2 shape: ours differs from nnsight by {diff:.3g}, over {atol:.3g}")
    out.update({"atol": atol, "heads": {"ours": s["ours"].to_dict(), "nnsight": s["nnsight"].to_dict(),
                     "ratio": s["ours"].median / s["nnsight"].median,
                     "pair_ratios": common.paired_ratios(s["ours"], s["nnsight"]), "max_diff": diff,
                     "cpu_ratio": s["ours"].cpu_median / s["nnsight"].cpu_median, "memory": memory}})
    h = out["heads"]
    print(f"SmolLM2-135M's shape, {T} tokens, heads: equal to nnsight's within {diff:.2g} (bound {atol:.2g}); "
          f"ours {s['ours'].median:.2f} s, nnsight {s['nnsight'].median:.2f} s, {h['ratio']:.2f}x "
          f"(CPU {s['ours'].cpu_median:.1f} / {s['nnsight'].cpu_median:.1f} s, {h['cpu_ratio']:.2f}x) "
          f"(goal <= {GOAL_NNSIGHT}x); memory added {mib(h['memory']['ours'])} / {mib(h['memory']['nnsight'])} MiB",
          flush=True)

    return out


def mib(n) -> str:
    return "?" if n is None else f"{n / 2**20:,.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each tool first (0 on a loaded machine: "
                    "the peers' runs take minutes there)")
    ap.add_argument("--only", default="gpt2,smollm", help="comma-separated subset of gpt2,smollm")
    ap.add_argument("--gpt2-kinds", default="heads,resid", help="comma-separated subset of heads,resid")
    ap.add_argument("--resid-every", type=int, default=1,
                    help="resid_pre at every N-th position only (default 1: the whole 12 x 64 grid)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    common.set_threads(args.threads)
    parts = args.only.split(",")
    result = {"machine": common.machine(), "versions": common.versions(), "threads": args.threads, "reps": args.reps,
              "warmup": args.warmup}
    from importlib import metadata
    result["versions"]["nnsight"] = metadata.version("nnsight")
    print(f"{result['machine']['cpu']}, {result['machine']['cores']} cores, load {result['machine']['load_avg']}, "
          f"torch threads {args.threads}", flush=True)
    if "gpt2" in parts:
        with tempfile.TemporaryDirectory() as folder:
            common.make_hf_folder(folder)
            result["gpt2"] = gpt2_part(folder, args.reps, args.warmup, args.gpt2_kinds.split(","), args.resid_every)
    if "smollm" in parts:
        with tempfile.TemporaryDirectory() as folder:
            result["smollm"] = smollm_part(folder, args.reps, args.warmup)
    result["load_after"] = os.getloadavg()
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
