"""Opening a published-size checkpoint: a random Qwen2 model of Qwen2.5-0.5B's shape (24 layers,
14 heads, 2 key/value heads, width 896, MLP 4864, vocabulary 151,936; 494M parameters) saved as
Hugging Face publishes it (bfloat16, sharded safetensors with an index, a tokenizer.json), loaded
in float32 by our `load_checkpoint` (read, fuse, convert, check every weight, tokenizer) and by
Hugging Face's `from_pretrained`, alternating in one process. Also how soon a load stops once
cancelled (at 10, 30 and 50% of its time). The folder is built once (about 1 GB, 10-20 s) in a temporary directory.

    python bench/load_bench.py [--reps 3] [--threads 2] [--out bench/results/load.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile

import torch
from common import cancelled_after, interleaved, machine, quiet_transformers, set_threads, versions

SHAPE = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
             intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768)


def make_folder(folder: str) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    sys.path.insert(0, ".")  # the tests' tokenizer builder: a byte-level BPE tokenizer.json
    from tests.helpers import tokenizers

    quiet_transformers()
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(**SHAPE)).to(torch.bfloat16).save_pretrained(folder, max_shard_size="500MB")
    tokenizers.byte_level(folder)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    set_threads(args.threads)
    from transformers import AutoModelForCausalLM

    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint

    print(f"{machine()['cpu']}, torch threads {args.threads}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        make_folder(folder)

        def ours():
            load_checkpoint(folder)
            gc.collect()

        def hf():
            AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
            gc.collect()

        s = interleaved({"ours": ours, "hf": hf}, args.reps, warmup=1)
        fractions = (0.1, 0.3, 0.5)  # of our fastest load
        waits = [cancelled_after(lambda c: load_checkpoint(folder, is_cancelled=c), f * min(s["ours"].times))
                 for f in fractions]
    ratio = s["ours"].median / s["hf"].median
    print(f"load: ours {s['ours'].median:.2f} s vs Hugging Face from_pretrained {s['hf'].median:.2f} s "
          f"({ratio:.2f}x); cancelled at 10 / 30 / 50% of it: stopped "
          + " / ".join(f"{w * 1e3:.0f}" for w in waits) + " ms later", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": machine(), "versions": versions(), "threads": args.threads, "shape": SHAPE,
                       "ours": s["ours"].to_dict(), "hf": s["hf"].to_dict(), "ratio": ratio,
                       "cancel_latency_s": waits}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
