"""The `environment` part: what computed the numbers (the app's and the libraries' versions, the
kernel path, the thread count, the CPU), and what to expect when another machine reopens it.

The same inputs through the same kernels in the same threads give the same bits; another CPU,
kernel path or thread count sums each dot product in another order, so the numbers then agree
only within float32 rounding: about 4 * 2**-23 * sqrt(max(n_embd, n_mlp)) * sqrt(n_layer + 1)
relative to the values' size (tests/helpers/tolerances.py derives the rule).
"""

from __future__ import annotations

import math
import os
import platform
from dataclasses import dataclass, field
from importlib import metadata

from transformer_viewer.model.sessions.fields import Fields
from transformer_viewer.model.sessions.parts import Part

LIBRARIES = ("numpy", "tokenizers", "tiktoken", "safetensors", "transformers")  # those that change numbers or tokens
MAX_LIBRARIES = 32
F32_EPS = 2.0 ** -23
SAFETY = 4.0


@dataclass(frozen=True)
class Environment:
    app: str = ""
    torch: str = ""
    libraries: dict[str, str] = field(default_factory=dict)
    kernel_path: str = ""  # `InferenceStrategy.kernel_path`, e.g. "gemm=onednn isa=AVX512 packed=blocks+head ..."
    threads: int = 0
    cpu: str = ""
    system: str = ""


def version_of(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def current_environment(model) -> Environment:
    """This process's environment computing `model`'s numbers, with the kernels it runs
    (model/kernels/inference.py; imports torch: call it where torch already runs)."""
    import torch

    from transformer_viewer.model.kernels.inference import kernel_path_of

    return Environment(app=version_of("transformer-viewer"), torch=torch.__version__,
                       libraries={name: version_of(name) for name in LIBRARIES},
                       kernel_path=kernel_path_of(model), threads=torch.get_num_threads(),
                       cpu=cpu_name(), system=f"{platform.system()} {platform.machine()}")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f.read(1 << 16).splitlines():
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def relative_tolerance(n_embd: int, n_layer: int, n_mlp: int = 0) -> float:
    """How far a final logit may move, relative to the logits' size, on another kernel path."""
    return SAFETY * F32_EPS * math.sqrt(max(n_embd, n_mlp, 1)) * math.sqrt(n_layer + 1)


def differences(saved: Environment, here: Environment) -> list[str]:
    """What differs between the machine that saved a session and this one, by name."""
    out = []
    for what, a, b in (("torch", saved.torch, here.torch), ("kernel path", saved.kernel_path, here.kernel_path),
                       ("threads", saved.threads, here.threads), ("CPU", saved.cpu, here.cpu)):
        if a and b and a != b:
            out.append(f"{what} {a} there, {b} here")
    return out


def note_for(saved: Environment, here: Environment, n_embd: int, n_layer: int) -> str | None:
    """One line saying what differs and the tolerance to expect (None: the same machine's setup)."""
    diff = differences(saved, here)
    if not diff:
        return None
    return (f"this session was computed elsewhere ({'; '.join(diff)}): numbers agree within float32 rounding, "
            f"about {relative_tolerance(n_embd, n_layer):.1e} of their size, not bit for bit")


def _to_json(e: Environment) -> dict:
    return {"app": e.app, "torch": e.torch, "libraries": dict(e.libraries), "kernel_path": e.kernel_path,
            "threads": e.threads, "cpu": e.cpu, "system": e.system, "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def _from_json(f: Fields) -> Environment:
    libraries = {}
    if (g := f.nested("libraries")) is not None:
        for name in list(g.obj)[:MAX_LIBRARIES]:
            libraries[str(name)[:64]] = g.text(name, "", max_chars=64)
        g.finish()
    f.text("omp_num_threads", max_chars=16)
    return Environment(f.text("app", "", max_chars=64), f.text("torch", "", max_chars=64), libraries,
                       f.text("kernel_path", "", max_chars=200), f.integer("threads", 0, 1 << 16, 0),
                       f.text("cpu", "", max_chars=200), f.text("system", "", max_chars=200))


PART = Part("environment", 1, _to_json, _from_json)
