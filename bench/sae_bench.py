"""An SAE beside a model of SmolLM2-135M's shape (width 576, 30 layers, random weights): encoding
every token's activation at 1,024 tokens with a 16,384-feature SAE and keeping each token's top
features, against SAELens's own `encode` of the same activations; and a feature clamp in the
last layer against one capture.

    python bench/sae_bench.py [--threads 2] [--tokens 1024] [--reps 7] [--capture-reps 3] [--top 32] [--out FILE.json]

Needs the `bench-sae` extra (sae-lens, which pins TransformerLens below 4, so it gets a venv of
its own: see BENCHMARKS.md). Nothing is downloaded. The SAE is made and written by SAELens
itself (`save_model`, random weights, the encoder's biases drawn too so features differ), and
both sides read that folder: SAELens with `SAE.load_from_disk`, ours with `load_sae`. Before
anything is timed, each token's top features from our path must equal the top of SAELens's
dense output.

- **Encode**: ours is `token_features(session, sae, top)` from a session whose clean run is
  cached (what the window asks for its feature panel): the hooked activation read from the
  cache, encoded a block of positions at a time, each token's top features kept (O(T top)).
  SAELens: `sae.encode(x)` on the same (T, 576) activation, returning the dense (T, 16,384)
  features (no top-k, less work than ours). Goal <= 1.0x, for a standard (ReLU) SAE and a TopK
  SAE (k 64).
- **Clamp in the last layer**: `Session.predict` under an Intervention clamping one feature of
  an SAE at `blocks.29.hook_resid_pre` (the last layer's input), each call a real change (the
  value alternates), against one full capture of the prompt (`Session.run` after new tokens, as
  `family_bench.py` times it). Goal <= 0.1x.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch
from common import interleaved, machine, paired_ratios, set_threads, versions
from long_prompts import SMOL, smol_session

D_IN, D_SAE, TOPK_K = SMOL["n_embd"], 16_384, 64
LAST = SMOL["n_layer"] - 1
HOOK = f"blocks.{LAST}.hook_resid_pre"
GOAL_ENCODE, GOAL_CLAMP = 1.0, 0.1


def saelens_folder(folder: str, architecture: str) -> str:
    """A random SAELens SAE written by SAELens's own `save_model`; returns its folder."""
    from sae_lens import StandardSAE, StandardSAEConfig, TopKSAE, TopKSAEConfig
    from sae_lens.saes.sae import SAEMetadata

    torch.manual_seed(0)
    meta = SAEMetadata(model_name="smol-shape", hook_name=HOOK, context_size=2048, prepend_bos=False)
    if architecture == "topk":
        sae = TopKSAE(TopKSAEConfig(d_in=D_IN, d_sae=D_SAE, k=TOPK_K, metadata=meta))
    else:
        sae = StandardSAE(StandardSAEConfig(d_in=D_IN, d_sae=D_SAE, metadata=meta))
    with torch.no_grad():
        sae.b_enc.normal_(0.0, 0.5)  # SAELens starts it at zero: every feature would look alike
        sae.b_dec.normal_(0.0, 0.1)
    path = os.path.join(folder, architecture)
    sae.save_model(path)
    return path


def measure(T: int, reps: int, top: int, capture_reps: int) -> dict:
    from sae_lens import SAE

    from transformer_viewer.model.analysis.sae_features import token_features
    from transformer_viewer.model.capture.interventions import FeatureClamp, Intervention
    from transformer_viewer.model.sae.loading import load_sae

    session = smol_session(T)
    tokens = session.tokens
    session.run()  # the clean run, cached: what the feature panel starts from
    out = {"tokens": T, "top": top, "encode": {}}
    with tempfile.TemporaryDirectory() as folder:
        for architecture in ("standard", "topk"):
            path = saelens_folder(folder, architecture)
            theirs = SAE.load_from_disk(path, device="cpu")
            index = session.attach_sae(load_sae(path, session.config, model_name="smol-shape"))
            x = session.sae_activation(index)[0]  # (T, d_in): the same activation both encode
            with torch.inference_mode():
                ref = theirs.encode(x)  # (T, d_sae)
            mine = token_features(session, index, top=top, skip_bos=False)
            ref_top = torch.topk(ref, top, dim=-1).values.clamp_min(0).numpy()
            diff = float(abs(mine.acts - ref_top).max())
            if not diff <= 1e-3 * max(1.0, float(ref_top.max())):
                raise SystemExit(f"{architecture}: our top features differ from SAELens's by {diff:.3g}; "
                                 "not the same SAE")

            def ours(index=index):
                token_features(session, index, top=top, skip_bos=False)

            def saelens(theirs=theirs, x=x):
                with torch.inference_mode():
                    theirs.encode(x)

            s = interleaved({"ours": ours, "saelens": saelens}, reps, warmup=1)
            out["encode"][architecture] = {
                "ours": s["ours"].to_dict(), "saelens": s["saelens"].to_dict(), "top_diff": diff,
                "ratio": s["ours"].median / s["saelens"].median,
                "pair_ratios": paired_ratios(s["ours"], s["saelens"])}
            print(f"T={T} {architecture}: ours (top {top} kept) {s['ours'].median * 1e3:.1f} ms vs SAELens encode "
                  f"{s['saelens'].median * 1e3:.1f} ms: {out['encode'][architecture]['ratio']:.2f}x "
                  f"(goal <= {GOAL_ENCODE}x)", flush=True)
        clamped = [False]

        def clamp():
            clamped[0] = not clamped[0]
            change = Intervention.make(session.config, clamps=(FeatureClamp(sae=index, feature=7, kind="set",
                                                                     value=5.0 if clamped[0] else 0.0),))
            session.predict(change)

        def capture():
            session.set_tokens(tokens)  # drops the cache: a full capture
            session.run()

        # Round-robin: each capture leaves the clean run cached, which the clamp after it starts from.
        k = interleaved({"capture": capture, "clamp": clamp}, capture_reps, warmup=1)
    out["clamp"] = {"clamp": k["clamp"].to_dict(), "capture": k["capture"].to_dict(),
                    "ratio": k["clamp"].median / k["capture"].median,
                    "pair_ratios": paired_ratios(k["clamp"], k["capture"])}
    print(f"T={T}: clamp in the last layer {k['clamp'].median * 1e3:.1f} ms vs one capture "
          f"{k['capture'].median * 1e3:.0f} ms: {out['clamp']['ratio']:.3f}x (goal <= {GOAL_CLAMP}x)", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=7, help="timed encodes per side (default: 7)")
    ap.add_argument("--capture-reps", type=int, default=3, help="timed captures and clamps (default: 3)")
    ap.add_argument("--top", type=int, default=32, help="features kept per token on our side (default: 32)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    set_threads(args.threads)
    result = {"machine": machine(), "versions": versions(), "threads": args.threads, "d_in": D_IN, "d_sae": D_SAE,
              "topk_k": TOPK_K, "hook": HOOK}
    m = result["machine"]
    print(f"{m['cpu']}, {m['cores']} cores, torch threads {args.threads}", flush=True)
    result["rows"] = [measure(args.tokens, args.reps, args.top, args.capture_reps)]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
