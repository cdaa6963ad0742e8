"""Device and dtype choice: `auto`, `cpu` or `cuda`, with a clear word when CUDA is absent."""

from __future__ import annotations

import os

import torch

from transformer_viewer.model.errors import DeviceError

DEVICE_CHOICES = ("auto", "cpu", "cuda")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cuda_available() -> bool:
    return torch.cuda.is_available()


def resolve_device(choice: str = "auto") -> torch.device:
    """`auto` picks CUDA when present, else CPU; `cuda` without a GPU is a DeviceError."""
    choice = (choice or "auto").lower()
    if choice == "auto":
        return torch.device("cuda" if cuda_available() else "cpu")
    if choice == "cpu":
        return torch.device("cpu")
    if choice.startswith("cuda"):
        if not cuda_available():
            raise DeviceError("CUDA was requested but no CUDA device is available here; use --device cpu")
        return torch.device(choice)
    raise DeviceError(f"unknown device {choice!r}; use one of {', '.join(DEVICE_CHOICES)}")


def resolve_device_with_fallback(choice: str = "auto") -> tuple[torch.device, str | None]:
    """For the app: never fail, fall back to CPU and return the message to show."""
    try:
        return resolve_device(choice), None
    except DeviceError as e:
        return torch.device("cpu"), f"{e}; running on CPU instead"


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name not in DTYPES:
        raise DeviceError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}")
    dtype = DTYPES[name]
    if dtype != torch.float32 and device.type != "cuda":
        raise DeviceError(f"{name} is supported on CUDA only; use --dtype float32 on the CPU")
    return dtype


def physical_memory() -> int:
    """This machine's memory in bytes."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 8 << 30  # a system that does not say (Windows): count a small laptop's
