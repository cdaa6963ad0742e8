"""The costs of an SAE beside the model, on a SmolLM2-135M-shaped model (576 wide, 30 layers,
random weights) and a random 16,384-feature TopK SAE on the last layer's residual stream:

- encode: every token's activation at T tokens through the SAE, each token's top k kept
  (`token_features`: encoded a block of positions at a time, O(T k) kept);
- clamp: what the app computes when a clamp of one feature in the last layer changes, the
  clean run cached: the next-token panel's `Session.predict`, then the views' `Session.run`
  (`logprobs=False`, as the worker asks), each recomputing the last layer alone; against one
  full capture of the prompt the session has not run. The issue asks for the clamp in at most
  0.1x the capture.

Usage: python bench/sae_bench.py [--device cpu|cuda] [--tokens 1024] [--reps 5] [--threads N]
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch
from common import interleaved, machine, prompt_tokens, set_threads

D_SAE, K, FEATURE = 16_384, 64, 123


def smollm_shaped():
    from transformer_viewer.model.checkpoints.checkpoint import LoadedModel
    from transformer_viewer.model.decoder.config import GPTConfig
    from transformer_viewer.model.decoder.gpt import GPT

    config = GPTConfig(n_layer=30, n_head=9, n_kv_head=3, n_embd=576, n_mlp=1536, vocab_size=50257,
                       block_size=2048, positional="rotary", norm="rmsnorm", mlp="gated", activation="silu",
                       bias=False)
    torch.manual_seed(0)
    return LoadedModel(model=GPT(config).eval(), config=config, format="native", source="<bench>", name="bench")


def write_sae(folder: str, d_in: int, hook: str) -> str:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(1)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        json.dump({"architecture": "topk", "d_in": d_in, "d_sae": D_SAE, "k": K, "dtype": "float32",
                   "apply_b_dec_to_input": True, "normalize_activations": "none",
                   "metadata": {"hook_name": hook, "sae_lens_version": "6.0.0", "model_from_pretrained_kwargs": {}}},
                  f)
    save_file({"W_enc": torch.randn(d_in, D_SAE, generator=g) / d_in ** 0.5,
               "W_dec": torch.randn(D_SAE, d_in, generator=g) / D_SAE ** 0.5,
               "b_enc": torch.zeros(D_SAE), "b_dec": torch.zeros(d_in)}, os.path.join(folder, "sae_weights.safetensors"))
    return folder


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.threads:
        set_threads(args.threads)
    from transformer_viewer.model.analysis.sae_features import token_features
    from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
    from transformer_viewer.model.capture.session import Session
    from transformer_viewer.model.sae.loading import load_sae

    loaded = smollm_shaped()
    loaded.model.to(args.device)
    L = loaded.config.n_layer
    hook = f"blocks.{L - 1}.hook_resid_post"
    with tempfile.TemporaryDirectory() as tmp:
        sae = load_sae(write_sae(os.path.join(tmp, "sae"), loaded.config.n_embd, hook), loaded.config)
    session = Session(loaded)
    session.set_tokens(prompt_tokens(args.tokens))
    index = session.attach_sae(sae)
    clean = session.no_change
    clamps = [Intervention.make(loaded.config, clamps=(FeatureClamp(index, FEATURE, "set", v),)) for v in (5.0, 6.0)]
    session.run(clean)
    flip = [0]

    def clamp():  # a new clamp value each call: never the cached run
        flip[0] ^= 1
        session.predict(clamps[flip[0]], update_cache=False)

    def clamp_trace():
        trace = session.run(clamps[flip[0]], logprobs=False)
        assert trace.first_layer_run == L - 1

    def capture():
        session._clear_cache()  # a capture of a prompt the session has not run
        session.run(clean, logprobs=False)

    def encode():
        found = token_features(session, index, top=K, intervention=clamps[flip[0]])
        assert found.ids.shape == (args.tokens, K)

    # capture() leaves the clean run cached, from which the clamp recomputes the last layer.
    times = interleaved({"encode": encode, "capture": capture, "clamp_predict": clamp, "clamp_trace": clamp_trace},
                        args.reps, 1)
    clamp_s = times["clamp_predict"].median + times["clamp_trace"].median
    out = {
        "device": str(session.device), "machine": machine(), "tokens": args.tokens, "d_in": loaded.config.n_embd,
        "d_sae": D_SAE, "k": K, **{name: t.to_dict() for name, t in times.items()},
        "clamp_over_capture": clamp_s / times["capture"].median,
        "torch": torch.__version__, "numpy": np.__version__,
    }
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
