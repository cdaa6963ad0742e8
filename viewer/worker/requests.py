"""What the GUI asks the worker for, and what comes back.

A request is a frozen dataclass deriving from `Request`; `WorkerClient.submit` stamps it with
a fresh `rid`. Requests of the same `kind` supersede each other: a newer one replaces an older
one still waiting, cancels one already running, and makes its result stale (dropped).

A handler is `handler(session, request, progress, is_cancelled) -> value`, run on the worker
thread. `session` is the worker's `WorkerSession` (None before the first load, for handlers
routed with `needs_session=False`); `progress(done, total, text="")` reports progress;
`is_cancelled()` is a thread-safe flag a long handler polls (raise `Cancelled` to stop);
`is_cancelled.newer` is the request of its kind that superseded it (None when the user
cancelled), so a handler may finish work that request would redo. The
value travels back as `Result.value`; a `ModelError` comes back as a one-line `Failure`.
A handler that creates a new session returns `NewSession(session, value)`.

A request with its own computation lives in one module with its handler (lens.py, scan.py,
generate.py beside this one): the handler imports the model code inside its body, so importing
the module keeps torch off the GUI thread. Which handler answers which request is said in one
place, registry.py's `ROUTES`. This module imports neither Qt nor torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

# Raised by a handler that saw `is_cancelled()`, or by the model code it passed the flag to;
# comes back as a cancelled Failure. One class for both: the model's (it imports no torch).
from transformer_viewer.model.errors import Cancelled  # noqa: F401 - handlers raise it, the client catches it

Handler = Callable[[Any, Any, Callable[..., None], Callable[[], bool]], Any]


@dataclass(frozen=True)
class Request:
    kind: ClassVar[str] = "request"  # requests of one kind supersede each other
    rid: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class LoadRequest(Request):
    """Load a checkpoint (None: the bundled model). On failure the old model stays."""

    kind: ClassVar[str] = "load"
    path: str | None = None
    device: str = "auto"
    n_head: int | None = None


@dataclass(frozen=True)
class DeviceRequest(Request):
    """Move the loaded model to `device` ("cpu", "cuda")."""

    kind: ClassVar[str] = "device"
    device: str = "cpu"


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class TraceRequest(Request):
    """Run `text` clean (cached per prompt) and, when `intervention` changes anything, under it too."""

    kind: ClassVar[str] = "trace"
    text: str = ""
    intervention: Any = None  # Intervention (model/capture/interventions.py); None: the clean run
    position: int | None = None  # prediction position; None: the last token
    top_k: int = 10


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class PredictRequest(TraceRequest):
    """Only the next-token distribution of `text` under `intervention`: the quick answer to a head
    toggle, shown while the TraceRequest submitted after it redraws every view. Its own kind,
    so the two do not supersede each other."""

    kind: ClassVar[str] = "predict"


@dataclass(frozen=True, eq=False)  # holds an ndarray: compared by identity
class LogprobsRequest(TraceRequest):
    """The per-token log-probabilities of the trace of `text` under `intervention` (the clean
    one without): the second, cancellable pass after the views have landed (the unembedding
    at every position is the costliest part of a capture at short prompts and of a late-layer
    toggle). The clean trace's come first, whatever the mask: masked views compare against them."""

    kind: ClassVar[str] = "logprobs"


@dataclass(frozen=True)
class ProbeRequest(Request):
    """What this machine offers (CUDA or not); the first thing the worker answers."""

    kind: ClassVar[str] = "probe"


# -- results ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    request: Request
    value: Any
    elapsed_ms: float = 0.0


@dataclass(frozen=True)
class Failure:
    request: Request
    message: str  # one line, for a dialog or the status bar
    cancelled: bool = False


@dataclass(frozen=True)
class Progress:
    request: Request
    done: float
    total: float  # 0: unknown (busy indicator)
    text: str = ""


@dataclass(frozen=True)
class ModelInfo:
    """What the GUI knows about the loaded model (no torch objects)."""

    name: str
    format: str
    source: str
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    n_params: int
    device: str
    n_mlp: int = 0
    vocab_size: int = 0
    family: str = ""  # "Llama", "GPT-2-style", ...
    tokenizer: str = "gpt2"  # the model's tokenizer spec: "gpt2" or the folder of its tokenizer.json
    # Taken once at load, for saved sessions (model/sessions/): the weights' Fingerprint, the
    # tokenizer files' sha256, the Environment computing the numbers.
    fingerprint: Any = None
    tokenizer_fingerprint: str = ""
    environment: Any = None

    @property
    def params_text(self) -> str:
        n = self.n_params
        for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
            if n >= div:
                return f"{n / div:.1f}{unit} params"
        return f"{n} params"


@dataclass(frozen=True)
class LoadResult:
    info: ModelInfo
    warning: str | None = None  # e.g. CUDA asked for, CPU used


@dataclass(frozen=True)
class TraceResult:
    trace: Any  # Trace under the mask (the clean one when nothing is masked)
    clean: Any  # Trace of the unmasked model for the same prompt and position
    forward_ms: float = 0.0  # clock time the request took on the worker (0 when all came from caches)
    # The worker thread's own CPU time in it: the clock time also holds waits while the GUI
    # thread (redrawing the views, holding the GIL) or other programs had the CPU.
    compute_ms: float | None = None


@dataclass(frozen=True)
class PredictResult:
    next: Any  # NextToken under the request's intervention; None when there was no clean run to start from


@dataclass(frozen=True)
class LogprobsResult:
    trace: Any  # the requested trace with token_logprobs filled in; None when it is no longer the worker's
    clean: Any = None  # the clean trace with its token_logprobs, when this request filled them in


@dataclass(frozen=True)
class ProbeResult:
    cuda_available: bool
    cuda_name: str = ""


@dataclass(frozen=True)
class NewSession:
    """Returned by a handler that built a session: the worker installs it, sends `value`."""

    session: Any
    value: Any


