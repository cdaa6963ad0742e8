"""Long prompts: what a capture costs in memory at 4,096 and 8,192 tokens, and what recomputing a
head's pattern (whole, or a 512 x 512 tile) costs afterwards.

    python bench/long_prompts.py [--tokens 4096,8192] [--hf-tokens 4096] [--threads 2] [--hf-cap-gb 6]

Each capture runs in a fresh process (peak RSS by VmHWM after clear_refs, as memory_probe.py):
ours on a random model of SmolLM2-135M's shape (Llama architecture: 30 layers, 9 heads, 3 KV
heads, width 576, MLP 1536, vocabulary 49,152), Hugging Face's LlamaForCausalLM of the same shape
with eager attention and `output_attentions=True` under an address-space cap (it needs the
(L, nh, T, T) patterns at once; its peak, or that it died at the cap, is reported). Then
GPT-2-small at 1,024 tokens, ours against Hugging Face, through memory_probe.py.

After our capture, on demand in a middle layer: one head's whole pattern (the first with the
layer's queries and keys recomputed, then other heads of the layer with them cached), and
512 x 512 tiles on the diagonal at the start, the middle and the end of the prompt, each cold
(another layer: its queries and keys recomputed) and warm (another head of that layer).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SMOL = dict(n_layer=30, n_head=9, n_kv_head=3, n_embd=576, n_mlp=1536, vocab_size=49152)


def _ids(T: int, vocab: int):
    import numpy as np

    return np.random.default_rng(0).integers(0, vocab, T)


def smol_session(T: int):
    """A Session over a random model of SmolLM2-135M's shape (ours, built directly) holding T
    random token ids."""
    import torch

    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.model.checkpoints.checkpoint import LoadedModel
    from transformer_viewer.model.decoder.config import GPTConfig
    from transformer_viewer.model.decoder.gpt import GPT
    from transformer_viewer.model.kernels.inference import install_inference
    from transformer_viewer.model.tokenizers.tokenizer import Tokenized

    torch.manual_seed(0)
    config = GPTConfig(block_size=max(T, 2048), positional="rotary", norm="rmsnorm", mlp="gated",
                       activation="silu", bias=False, **SMOL)
    model = GPT(config).eval()
    install_inference(model)  # as the app's session does after a load
    loaded = LoadedModel(model=model, config=config, format="native", source="<bench>", name="smol-shape")
    session = Session(loaded)
    ids = _ids(T, config.vocab_size)
    session.set_tokens(Tokenized(ids=tuple(int(i) for i in ids), labels=tuple("t" for _ in ids),
                                 spans=tuple((i, i + 1) for i in range(T)), text="x" * T))
    return session


def probe_ours(T: int, threads: int) -> dict:
    import memory_probe
    import torch

    from transformer_viewer.model.capture.on_demand import head_pattern, pattern_tile

    torch.set_num_threads(threads)
    session = smol_session(T)
    config = session.config

    import gc

    gc.collect()
    base = memory_probe.psutil.Process().memory_info().rss
    memory_probe._reset_hwm()
    t0, c0 = time.perf_counter(), time.process_time()
    trace = session.run()
    capture_s, capture_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    peak = memory_probe._hwm()
    out = {"tool": "ours", "tokens": T, "increase": peak - base, "capture_s": capture_s,
           "capture_cpu_s": capture_cpu_s, "trace_bytes": trace.nbytes,
           "estimate": session.estimate_bytes(T)}
    layer, head = config.n_layer // 2, 4
    t0 = time.perf_counter()
    head_pattern(session, trace, layer, head)
    out["pattern_first_ms"] = (time.perf_counter() - t0) * 1000  # includes the layer's queries and keys
    times = []
    for h in (0, 1, 2, 3, 5):
        t0 = time.perf_counter()
        head_pattern(session, trace, layer, h)
        times.append((time.perf_counter() - t0) * 1000)
    out["pattern_ms"] = statistics.median(times)  # the layer's queries and keys cached
    for name, r0 in (("start", 0), ("middle", T // 2 - 256), ("end", T - 512)):
        cold, warm = [], []
        for h in (0, 1, 2):
            session.recompute_cache.clear()  # as for a tile of another layer: its q/k recomputed
            t0 = time.perf_counter()
            pattern_tile(session, trace, layer + 1, h, (r0, r0 + 512), (r0, r0 + 512))
            cold.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            pattern_tile(session, trace, layer + 1, h + 3, (r0, r0 + 512), (r0, r0 + 512))
            warm.append((time.perf_counter() - t0) * 1000)
        out[f"tile_{name}_ms"] = statistics.median(warm)
        out[f"tile_{name}_cold_ms"] = statistics.median(cold)
    return out


def probe_hf(T: int, threads: int, cap_gb: float) -> dict:
    import memory_probe
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(num_hidden_layers=SMOL["n_layer"], num_attention_heads=SMOL["n_head"],
                      num_key_value_heads=SMOL["n_kv_head"], hidden_size=SMOL["n_embd"],
                      intermediate_size=SMOL["n_mlp"], vocab_size=SMOL["vocab_size"], max_position_embeddings=T,
                      attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.as_tensor(_ids(T, cfg.vocab_size))[None]
    import gc

    gc.collect()
    base = memory_probe.psutil.Process().memory_info().rss
    cap = int(cap_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    memory_probe._reset_hwm()
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            out = model(ids, output_attentions=True, output_hidden_states=True, use_cache=False)
        died = False
    except (MemoryError, RuntimeError):
        out, died = None, True
    elapsed = time.perf_counter() - t0
    peak = memory_probe._hwm()
    del out
    return {"tool": "hf", "tokens": T, "increase": peak - base, "seconds": elapsed, "died_at_cap": died,
            "cap_gb": cap_gb}


def _child(args: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True,
                          env=env, timeout=1200)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"args": args, "failed": done.returncode, "stderr": done.stderr[-800:]}
    return json.loads(lines[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", default="4096,8192", help="prompt lengths of our capture, comma-separated")
    p.add_argument("--hf-tokens", default="4096", help="lengths Hugging Face is tried at (its patterns are "
                   "(L, nh, T, T) at once: 18 GB at 4,096 tokens)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hf-cap-gb", type=float, default=6.0)
    p.add_argument("--probe", choices=["ours", "hf"])
    a = p.parse_args()
    if a.probe == "ours":
        print(json.dumps(probe_ours(int(a.tokens), a.threads)), flush=True)
        return
    if a.probe == "hf":
        print(json.dumps(probe_hf(int(a.tokens), a.threads, a.hf_cap_gb)), flush=True)
        return
    sys.path.insert(0, HERE)
    import common

    results = {"machine": common.machine(), "threads": a.threads}
    for T in (int(t) for t in a.tokens.split(",") if t):
        results[f"ours_{T}"] = _child(["--probe", "ours", "--tokens", str(T), "--threads", str(a.threads)])
        print(json.dumps(results[f"ours_{T}"]), flush=True)
    for T in (int(t) for t in a.hf_tokens.split(",") if t):
        results[f"hf_{T}"] = _child(["--probe", "hf", "--tokens", str(T), "--threads", str(a.threads),
                                     "--hf-cap-gb", str(a.hf_cap_gb)])
        print(json.dumps(results[f"hf_{T}"]), flush=True)

    with tempfile.TemporaryDirectory() as folder:
        common.make_hf_folder(folder)
        for tool in ("ours", "hf"):
            done = subprocess.run([sys.executable, os.path.join(HERE, "memory_probe.py"), tool, folder, "1024",
                                   str(a.threads)], capture_output=True, text=True, timeout=1200)
            lines = done.stdout.strip().splitlines()
            results[f"gpt2_{tool}"] = json.loads(lines[-1]) if lines else {"failed": done.stderr[-800:]}
    results["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
