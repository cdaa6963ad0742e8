"""The views at the sizes current models have: render each to PNG and time its redraw.

Random Hugging Face folders, built here with `transformers` (random weights, save_pretrained)
and a byte-level tokenizer.json whose vocabulary has the model's size, are loaded through our
loader into a session that keeps only what the window will keep (no full patterns or MLP
activations: those come from the worker on demand):

  smollm  30 layers x 9 heads (3 KV), width 576, MLP 1536, vocabulary 49,152 (SmolLM2-135M's shape)
  qwen    28 layers x 16 heads (4 KV), MLP 8,960, vocabulary 151,936 (Qwen2's; width shrunk to 256)
  long    2 layers x 4 heads, an 8,192-token prompt (a tiny long-context Llama)

For each model: the MLP view (and its diff under a mask), the residual stream, the logit lens,
the next-token panel, the head-mask grid and (with --scan) the head scan, each rendered
offscreen to OUT/<model>-<view>.png, and each view's redraw time (median of --reps) printed,
with the worker's time for the on-demand MLP activations and the lens.

    python bench/view_sizes.py --out /tmp/views [--models smollm qwen long] [--scan]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

MODELS = {
    "smollm": ("LlamaConfig", "LlamaForCausalLM", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                                      num_hidden_layers=30, num_attention_heads=9,
                                                      num_key_value_heads=3, max_position_embeddings=2048,
                                                      tie_word_embeddings=True)),
    "qwen": ("Qwen2Config", "Qwen2ForCausalLM", dict(vocab_size=151936, hidden_size=256, intermediate_size=8960,
                                                    num_hidden_layers=28, num_attention_heads=16,
                                                    num_key_value_heads=4, max_position_embeddings=4096,
                                                    tie_word_embeddings=False)),
    "long": ("LlamaConfig", "LlamaForCausalLM", dict(vocab_size=512, hidden_size=64, intermediate_size=256,
                                                    num_hidden_layers=2, num_attention_heads=4,
                                                    num_key_value_heads=2, max_position_embeddings=16384)),
}
PROMPTS = {"smollm": 96, "qwen": 96, "long": 8192}  # prompt length in tokens (one byte each)
TEXT = "The lighthouse keeper climbed the stairs and looked out over the grey water, counting ships. "


def write_tokenizer(folder: str, vocab_size: int) -> None:
    """A byte-level tokenizer.json with `vocab_size` entries: the 256 byte symbols (every text
    is spelled with them, one token per byte) and named filler tokens up to the model's size, so
    the lens and the next-token panel label ids across the whole vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    vocab["<|endoftext|>"] = len(vocab)
    for i in range(len(vocab), vocab_size):
        vocab[f"tok{i}"] = i
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(["<|endoftext|>"])
    tk.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": False}, f)


def build_folder(name: str, root: str) -> str:
    import torch
    import transformers

    config_cls, model_cls, kwargs = MODELS[name]
    folder = os.path.join(root, name)
    if os.path.exists(os.path.join(folder, "config.json")):
        return folder
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(bos_token_id=256, eos_token_id=256, **kwargs)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # larger than the 0.02 init: peaked attention, varied norms and neurons
        for p in model.parameters():
            p.mul_(4.0) if p.dim() >= 2 else p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(folder)
    write_tokenizer(folder, kwargs["vocab_size"])
    del model
    return folder


def wait(app, condition, timeout_s: float = 600.0) -> None:
    end = time.perf_counter() + timeout_s
    while not condition():
        if time.perf_counter() > end:
            raise TimeoutError("the worker did not answer in time")
        app.processEvents()
        time.sleep(0.002)


def redraw_ms(app, fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        app.processEvents()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def run_model(name: str, folder: str, out: str, reps: int, scan: bool) -> list[tuple[str, str, float]]:
    import numpy as np
    from PySide6 import QtWidgets

    from transformer_viewer.model.capture.interventions import Intervention
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.kernels.inference import install_inference
    from transformer_viewer.viewer.state import ViewerState
    from transformer_viewer.viewer.views.lens_view import LensView
    from transformer_viewer.viewer.views.logits_panel import LogitsPanel
    from transformer_viewer.viewer.views.mask_grid import MaskGrid
    from transformer_viewer.viewer.views.mlp_view import MLPView
    from transformer_viewer.viewer.views.residual_view import ResidualView
    from transformer_viewer.viewer.views.scan_view import ScanView
    from transformer_viewer.viewer.worker.client import WorkerClient
    from transformer_viewer.viewer.worker.handlers import WorkerSession
    from transformer_viewer.viewer.worker.requests import TraceRequest

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    rows: list[tuple[str, str, float]] = []
    client = WorkerClient()
    loaded = load_checkpoint(folder, device="cpu")
    install_inference(loaded.model)  # as the worker's session does after a load
    session = WorkerSession(loaded)  # keeps what the window will keep
    client.worker.session = session
    state = ViewerState()
    state.set_model(session.info())
    T = PROMPTS[name]
    prompt = (TEXT * (T // len(TEXT) + 1))[:T]
    state.set_prompt(prompt)
    L, nh = state.n_layer, state.n_head
    mask = np.zeros((L, nh), dtype=bool)
    mask[L // 2, 1] = mask[L - 1, 0] = True

    def trace(m):
        got = []
        t0 = time.perf_counter()
        client.submit(TraceRequest(text=prompt, intervention=None if m is None else Intervention.make(state, m)),
                      on_result=got.append,
                      on_failure=lambda f: sys.exit(f"{name}: {f.message}"))
        wait(app, lambda: bool(got))
        rows.append((name, "capture (worker)", (time.perf_counter() - t0) * 1000.0))
        state.set_mask(np.zeros((L, nh), bool) if m is None else m)
        state.set_traces(got[0].value.trace, got[0].value.clean)

    trace(None)
    state.set_selection(layer=L - 1, query=T - 1)
    views = {"mlp": MLPView(state, client), "residual": ResidualView(state), "lens": LensView(state, client),
             "next-token": LogitsPanel(state), "mask-grid": MaskGrid(state)}
    if scan:
        views["scan"] = ScanView(state, client)
    sizes = {"next-token": (420, 360), "mask-grid": (300, 420)}
    for key, view in views.items():
        view.resize(*sizes.get(key, (1300, 620)))
        t0 = time.perf_counter()
        view.show()
        if key in ("mlp", "lens"):  # asked for when shown: the worker computes, then the view draws
            wait(app, lambda v=view: not client.busy and (v.matrix().size > 0))
            rows.append((name, f"{key}: fetch + first draw", (time.perf_counter() - t0) * 1000.0))
        app.processEvents()
    logits = views["next-token"]
    logits.refresh()
    timings = {"mlp": lambda: views["mlp"].refresh(), "residual": lambda: views["residual"].refresh(),
               "lens": lambda: views["lens"].refresh(), "next-token": logits.refresh,
               "mask-grid": lambda: views["mask-grid"].canvas.repaint()}
    for key, fn in timings.items():
        rows.append((name, f"{key}: redraw", redraw_ms(app, fn, reps)))
    if scan:
        t0 = time.perf_counter()
        views["scan"].start()
        wait(app, lambda: not views["scan"].running)
        rows.append((name, f"scan of {L * nh} heads (worker)", (time.perf_counter() - t0) * 1000.0))
    for key, view in views.items():
        view.grab().save(os.path.join(out, f"{name}-{key}.png"))
    # under a mask: the MLP diff needs the clean run's activations as well (the lens, hidden,
    # asks for nothing meanwhile)
    views["lens"].hide()
    trace(mask)
    mlp = views["mlp"]
    mlp.diff.setChecked(True)
    t0 = time.perf_counter()
    wait(app, lambda: not client.busy and mlp.diff.active and mlp.matrix().size > 0)
    rows.append((name, "mlp diff: fetch + first draw", (time.perf_counter() - t0) * 1000.0))
    rows.append((name, "mlp diff: redraw", redraw_ms(app, mlp.refresh, reps)))
    mlp.grab().save(os.path.join(out, f"{name}-mlp-diff.png"))
    views["mask-grid"].grab().save(os.path.join(out, f"{name}-mask-grid-masked.png"))
    for view in views.values():
        view.close()
    client.close()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the PNGs")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "tv-view-sizes"),
                        help="where the random model folders are built (reused when there)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--scan", action="store_true", help="also run and time the head scan over every head")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.models:
        rows += run_model(name, build_folder(name, args.cache), args.out, args.reps, args.scan)
    width = max(len(f"{m} {what}") for m, what, _ in rows)
    for model, what, ms in rows:
        print(f"{model + ' ' + what:<{width}}  {ms:9.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
