"""Which format a path holds, decided from its contents (not trusting the extension alone)."""

from __future__ import annotations

import os
from collections.abc import Callable

from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.formats import native

Reader = Callable[..., tuple]


def _read_native(path: str, n_head: int | None = None):
    return native.read_native(path)


def find_reader(source: str) -> tuple[str, Reader]:
    if not os.path.exists(source):
        raise CheckpointError(f"{source}: file not found; check the path")
    if os.path.isfile(source) and native.is_native(source):
        return "native", _read_native
    raise CheckpointError(f"{source}: unknown checkpoint format")
