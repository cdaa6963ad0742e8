"""What every measurement shares: the random GPT-2-small-shaped model saved in Hugging Face format,
the three ways of loading it, the prompts, and the timer.

All three tools load the same folder, so they compute the same function; `check_agreement`
verifies that before anything is timed.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass

# Nothing may download: the peers must read the local folder only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

N_LAYER, N_HEAD, N_EMBD, VOCAB, CONTEXT = 12, 12, 768, 50257, 1024
SEED = 0

# Ordinary English, tokenized and repeated to the prompt length, so the ids look like a real prompt.
PROSE = (
    "The history of the lighthouse on the northern cape begins with a wooden tower built by the "
    "fishermen of the village, who had lost three boats in a single winter to the rocks below the "
    "cliff. When the tower burned down forty years later, the harbour board paid for a stone one, "
    "and a family of keepers lived in it until the light was automated. Visitors can still climb "
    "the spiral stairs, count the hundred and twelve steps, and look out over the grey water "
    "towards the islands, where seals sleep on the flat rocks at low tide. "
)


def set_threads(n: int) -> None:
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already fixed once in this process


def quiet_transformers() -> None:
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()


def make_hf_folder(folder: str) -> str:
    """Save a randomly initialised GPT-2-small-shaped GPT2LMHeadModel to `folder`."""
    from transformers import GPT2Config, GPT2LMHeadModel

    quiet_transformers()

    torch.manual_seed(SEED)
    cfg = GPT2Config(n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, vocab_size=VOCAB, n_positions=CONTEXT,
                     n_ctx=CONTEXT)
    model = GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(folder)
    return folder


def prompt_ids(T: int) -> torch.Tensor:
    """(1, T) token ids of PROSE repeated."""
    from transformer_viewer.model.tokenizers.tokenizer import Tokenizer

    ids = Tokenizer().encode(PROSE)
    reps = -(-T // len(ids))
    return torch.tensor([(ids * reps)[:T]], dtype=torch.long)


def prompt_tokens(T: int):
    """The same ids as `prompt_ids`, as the Tokenized our Session takes."""
    from transformer_viewer.model.tokenizers.tokenizer import Tokenized, Tokenizer

    tk = Tokenizer()
    ids = tuple(int(i) for i in prompt_ids(T)[0])
    text = tk.decode(ids)
    return Tokenized(ids, tuple(tk.label(i) for i in ids), tuple(tk.spans(ids, text)), text)


# -- loaders ------------------------------------------------------------------------------------
def load_hf(folder: str):
    from transformers import GPT2LMHeadModel

    quiet_transformers()
    return GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def load_tl(folder: str):
    from transformer_lens.model_bridge import TransformerBridge

    quiet_transformers()
    bridge = TransformerBridge.boot_transformers(folder, device="cpu", dtype=torch.float32)
    bridge.eval()
    return bridge


def load_ours(folder: str):
    """(LoadedModel, how it was loaded): our own Hugging Face folder reader."""
    from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
    from transformer_viewer.model.kernels.inference import install_inference

    loaded = load_checkpoint(folder, device="cpu")
    install_inference(loaded.model)  # as the app's session does after a load
    return loaded, "load_checkpoint (model/checkpoints/formats/huggingface.py)"


# -- agreement ---------------------------------------------------------------------------------
def check_agreement(hf, tl, loaded, T: int = 64, atol: float = 1e-3) -> dict:
    """Max |logit difference| between the three tools on one prompt; raises if over atol."""
    ids = prompt_ids(T)
    with torch.inference_mode():
        ref = hf(ids).logits[0].float()  # (T, V)
        tl_logits = tl(ids)[0].float()
        ours = loaded.model(ids)[0][0].float()
    diffs = {"tl_vs_hf": float((tl_logits - ref).abs().max()), "ours_vs_hf": float((ours - ref).abs().max()),
             "logit_scale": float(ref.abs().max())}
    bad = {k: v for k, v in diffs.items() if k != "logit_scale" and not v <= atol}
    if bad:
        raise SystemExit(f"logits disagree before timing: {bad} (atol {atol}); the tools do not compute the same model")
    return diffs


# -- timing ------------------------------------------------------------------------------------
@dataclass
class Samples:
    times: list[float]  # wall seconds
    cpu: list[float]  # this process's CPU seconds (all threads), less sensitive to other load

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)

    def to_dict(self) -> dict:
        return {"median_s": self.median, "min_s": min(self.times), "max_s": max(self.times), "n": len(self.times),
                "cpu_median_s": self.cpu_median}


def paired_ratios(a: Samples, b: Samples) -> list[float]:
    """a / b repetition by repetition: each pair was timed back to back by `interleaved`, so a
    drift of the machine's speed over the run falls on both sides of each ratio."""
    return [x / y for x, y in zip(a.times, b.times, strict=True)]


def interleaved(fns: dict, reps: int, warmup: int) -> dict[str, Samples]:
    """Time each callable `reps` times after `warmup` calls, round-robin, so background load
    falls on every tool alike. Returns seconds per call."""
    out = {name: Samples([], []) for name in fns}
    for i in range(warmup + reps):
        for name, fn in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            if i >= warmup:
                out[name].times.append(dt)
                out[name].cpu.append(dc)
    return out


def cancelled_after(call, after_s: float) -> float:
    """Run `call(is_cancelled)`, set the flag after `after_s` from another thread (as the window's
    Cancel button does); seconds from the flag to `Cancelled`."""
    from transformer_viewer.model.errors import Cancelled

    flag = threading.Event()
    set_at = []

    def cancel() -> None:
        set_at.append(time.perf_counter())
        flag.set()

    timer = threading.Timer(after_s, cancel)
    timer.start()
    try:
        call(flag.is_set)
    except Cancelled:
        return time.perf_counter() - set_at[0]
    finally:
        timer.cancel()
    raise SystemExit(f"it finished before it was cancelled at {after_s:.2f} s: cancel earlier")


def machine() -> dict:
    import platform
    import subprocess

    cpu = platform.processor() or "unknown"
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout.splitlines()
        cpu = next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Model name"))
    except (OSError, StopIteration, subprocess.SubprocessError):
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {"cpu": cpu, "cores": os.cpu_count(), "load_avg": [round(x, 2) for x in load], "python": platform.python_version(),
            "mkl_path": mkl_code_path()}


def mkl_code_path() -> str:
    """The code path MKL's GEMM takes on this CPU, as its verbose mode names it: "Intel(R)
    Architecture processors" is its generic path (what it gives an AMD CPU), an instruction set
    (e.g. "Intel(R) Advanced Vector Extensions 512 ...") its own kernels, as on an Intel CPU.
    Hugging Face's products run on MKL, ours on oneDNN, so this decides much of the ratio.
    Asked of a child process, whose output MKL's verbose mode may print to."""
    import subprocess

    code = "import torch; torch.mm(torch.ones(64, 64), torch.ones(64, 64))"
    env = dict(os.environ, MKL_VERBOSE="1")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    marker = "for Intel(R) 64 architecture "
    for line in out.splitlines():
        if marker in line:
            return line.split(marker, 1)[1].split(", Lnx")[0].strip()
    return "unknown (MKL printed no version line)"


def versions() -> dict:
    from importlib import metadata

    out = {}
    for pkg in ("torch", "transformers", "transformer-lens", "numpy", "transformer-viewer", "PySide6-Essentials",
                "pyqtgraph"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def to_numpy(x) -> np.ndarray:
    return x.detach().cpu().numpy()
