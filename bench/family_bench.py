"""A Llama-architecture model of SmolLM2-135M's shape (30 layers, 9 heads, 3 key/value heads,
width 576, MLP 1536, vocab 49152), random weights saved with save_pretrained: our full capture
against Hugging Face's eager forward with attentions and hidden states, and a last-layer head
toggle against a full Hugging Face forward. float32, CPU, timed round-robin in one process. Ours
is the capture the window keeps (overviews, patterns on demand), with and without the per-token
log-probabilities (the views first; they follow in a second pass). For reference, the decoder
alone: the same forward and log-probabilities with nothing captured (no hooks, no readers), the
floor a capture stands on. And the weight products alone on both sides (bench/weight_products.py),
so each run shows what its ratio is made of: the products, and everything else. Prints the CPU
model and the code path MKL takes on it.

    python bench/family_bench.py [--threads 2] [--lengths 256,1024] [--reps N] [--out bench/results/family.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile

import numpy as np
import torch
import weight_products
from common import interleaved, machine, paired_ratios, quiet_transformers, set_threads, versions

SHAPE = dict(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576,
             intermediate_size=1536, vocab_size=49152, max_position_embeddings=2048, rope_theta=100000.0,
             tie_word_embeddings=True, rms_norm_eps=1e-5)
REPS = {256: 7, 1024: 3}
GOAL_CAPTURE, GOAL_TOGGLE = 0.8, 0.1


def make_folder(folder: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    quiet_transformers()
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**SHAPE)).eval().save_pretrained(folder)
    return LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def load_ours(folder: str):
    """Through the reader and build_model: the app's path less its tokenizer (random weights have none)."""
    from transformer_viewer.model.checkpoints.checkpoint import LoadedModel, build_model
    from transformer_viewer.model.checkpoints.formats import huggingface
    from transformer_viewer.model.kernels.inference import install_inference

    config, state, info = huggingface.read_folder(folder)
    model = build_model(config, state, folder, key_name=info["key_name"])
    install_inference(model)  # as the app's session does after a load
    return LoadedModel(model=model, config=config, format="huggingface", source=folder, name="smollm2-shape",
                       training=info["training"])


def tokens(T: int):
    from transformer_viewer.model.tokenizers.tokenizer import Tokenized

    ids = torch.randint(0, SHAPE["vocab_size"], (T,), generator=torch.Generator().manual_seed(T)).tolist()
    return Tokenized(tuple(ids), tuple("t" for _ in ids), tuple((i, i + 1) for i in range(T)), "t" * T)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--lengths", default="256,1024", help="prompt lengths, comma-separated")
    ap.add_argument("--reps", type=int, default=0, help="timed repetitions per length (default: 7 at 256, 3 at 1024)")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    set_threads(args.threads)
    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.model.capture.unembedding import token_logprobs

    with tempfile.TemporaryDirectory() as folder:
        hf = make_folder(folder)
        loaded = load_ours(folder)
    session = Session(loaded)  # what the window keeps: overviews, patterns on demand
    L, nh = loaded.config.n_layer, loaded.config.n_head
    rows = []
    result = {"machine": machine(), "versions": versions(), "threads": args.threads, "shape": SHAPE, "rows": rows}
    print(f"{result['machine']['cpu']}, {result['machine']['cores']} cores, torch threads {args.threads}; MKL's "
          f"path (Hugging Face's products): {result['machine']['mkl_path']}", flush=True)
    for T in lengths:
        reps = args.reps or REPS.get(T, 3)
        tok = tokens(T)
        ids = torch.tensor([tok.ids])
        with torch.inference_mode():
            ref = hf(ids).logits[0]
            ours = loaded.model(ids)[0][0]
        diff = float((ours - ref).abs().max())
        if diff > 1e-3:
            raise SystemExit(f"logits disagree before timing ({diff:.3g}): not the same model")

        def capture(tok=tok):
            session.set_tokens(tok)  # drops the cache: a full capture
            session.run()

        def views_first(tok=tok):
            session.set_tokens(tok)
            session.run(logprobs=False)  # what the views wait for; the log-probabilities follow

        def decoder_alone(ids=ids):
            with torch.inference_mode():
                final = loaded.model.run_blocks(loaded.model.embed(ids))  # (1, T, C)
                token_logprobs(loaded.model, final[0], ids[0], ids.shape[1] - 1, SHAPE["vocab_size"])

        def hf_capture(ids=ids):
            with torch.inference_mode():
                hf(ids, output_attentions=True, output_hidden_states=True, use_cache=False)

        def hf_forward(ids=ids):
            with torch.inference_mode():
                hf(ids, use_cache=False)

        toggled = [False]
        mask = np.zeros((L, nh), dtype=bool)

        def toggle(toggled=toggled, mask=mask):
            toggled[0] = not toggled[0]
            mask[L - 1, 0] = toggled[0]
            session.predict(mask)

        s = interleaved({"capture": capture, "views_first": views_first, "decoder_alone": decoder_alone,
                         "hf_capture": hf_capture, "products": weight_products.ours(loaded.model, T, SHAPE["vocab_size"]),
                         "hf_products": weight_products.theirs(hf, T)}, reps, warmup=1)
        session.set_tokens(tok)
        session.run()
        t = interleaved({"toggle": toggle, "hf_forward": hf_forward}, reps, warmup=1)
        row = {"tokens": T, "logit_diff": diff, "capture": s["capture"].to_dict(), "hf_capture": s["hf_capture"].to_dict(),
               "toggle": t["toggle"].to_dict(), "hf_forward": t["hf_forward"].to_dict(),
               "views_first": s["views_first"].to_dict(), "decoder_alone": s["decoder_alone"].to_dict(),
               "capture_ratio": s["capture"].median / s["hf_capture"].median,
               "views_first_ratio": s["views_first"].median / s["hf_capture"].median,
               "decoder_alone_ratio": s["decoder_alone"].median / s["hf_capture"].median,
               "toggle_ratio": t["toggle"].median / t["hf_forward"].median,
               "capture_pair_ratios": paired_ratios(s["capture"], s["hf_capture"]),
               "products": s["products"].to_dict(), "hf_products": s["hf_products"].to_dict()}
        ours_p, hf_p = s["products"].median, s["hf_products"].median
        row["rest_ms"] = {"capture": (s["capture"].median - ours_p) * 1e3, "hf_capture": (s["hf_capture"].median - hf_p) * 1e3}
        pairs = sorted(row["capture_pair_ratios"])
        rows.append(row)
        print(f"T={T}: capture {row['capture']['median_s'] * 1e3:.0f} ms vs HF {row['hf_capture']['median_s'] * 1e3:.0f}"
              f" ms ({row['capture_ratio']:.2f}x, goal <= {GOAL_CAPTURE}x; views first "
              f"{row['views_first']['median_s'] * 1e3:.0f} ms, {row['views_first_ratio']:.2f}x; the decoder alone "
              f"{row['decoder_alone']['median_s'] * 1e3:.0f} ms, {row['decoder_alone_ratio']:.2f}x); last-layer toggle "
              f"{row['toggle']['median_s'] * 1e3:.1f} ms vs HF forward {row['hf_forward']['median_s'] * 1e3:.0f} ms "
              f"({row['toggle_ratio']:.3f}x, goal <= {GOAL_TOGGLE}x); CPU seconds: capture "
              f"{row['capture']['cpu_median_s']:.2f} vs HF {row['hf_capture']['cpu_median_s']:.2f}; capture / HF "
              f"run by run {pairs[0]:.2f}-{pairs[-1]:.2f}x, median {statistics.median(pairs):.2f}x", flush=True)
        print(f"  of which the weight products alone: ours {ours_p * 1e3:.0f} ms, HF's {hf_p * 1e3:.0f} ms "
              f"({ours_p / hf_p:.2f}x); everything else: ours {row['rest_ms']['capture']:.0f} ms, HF's "
              f"{row['rest_ms']['hf_capture']:.0f} ms; were everything else free, the capture would be "
              f"{ours_p / row['hf_capture']['median_s']:.2f}x", flush=True)
        if args.out:  # after every row, so a long run that is stopped keeps what it measured
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
