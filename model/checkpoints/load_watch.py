"""Progress and cancellation of a checkpoint load, tensor by tensor.

A model of a few billion parameters is gigabytes to read, convert to float32 and check: seconds
from a warm cache, minutes from a slow disk. `watching(progress, is_cancelled)` around a load
lets the code that takes each tensor say so (`tensor_done`) without a parameter threaded through
every format's reader, as the readers are chosen by what a file holds. Outside `watching`,
`tensor_done` does nothing.

A cancelled load raises `Cancelled` from the tensor it was at: what it had read is dropped as
the exception unwinds, and whatever model the caller had is untouched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from transformer_viewer.model.errors import stop_if_cancelled

# What a load does, in order: the readers that build tensors (fused projections, converted
# weights) take them first; build_model then checks every tensor the model is made of.
READING, CHECKING = "reading the weights", "checking the weights"
STAGES = (READING, CHECKING)

Progress = Callable[[int, int, str], None]  # (done, total, stage)


class LoadWatch:
    def __init__(self, progress: Progress | None, is_cancelled: Callable[[], bool] | None):
        self.progress, self.is_cancelled = progress, is_cancelled

    def step(self, stage: str, done: int, total: int) -> None:
        stop_if_cancelled(self.is_cancelled)
        if self.progress is not None:
            self.progress(done, total, stage)


_current: ContextVar[LoadWatch | None] = ContextVar("transformer_viewer_load_watch", default=None)


@contextlib.contextmanager
def watching(progress: Progress | None = None, is_cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
    """Within the block, each tensor a load takes calls `progress(done, total, stage)` (stage
    one of STAGES), and raises `Cancelled` once `is_cancelled()` is true."""
    if progress is None and is_cancelled is None:
        yield
        return
    token = _current.set(LoadWatch(progress, is_cancelled))
    try:
        yield
    finally:
        _current.reset(token)


def check_cancelled() -> None:
    """Stop here if the load is cancelled (between files, where no tensor count is known yet)."""
    watch = _current.get()
    if watch is not None:
        stop_if_cancelled(watch.is_cancelled)


def tensor_done(stage: str, done: int, total: int) -> None:
    """`done` of `total` tensors of `stage` are taken: report it, or stop if the load is cancelled."""
    watch = _current.get()
    if watch is not None:
        watch.step(stage, done, total)
