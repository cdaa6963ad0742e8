"""The built-in worker handlers: load, device, probe, trace. Runs on the worker thread only.

This is where torch gets imported in the app; the GUI thread never imports this module.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import torch

from transformer_viewer.model.capture.interventions import Intervention
from transformer_viewer.model.capture.session import DEFAULT_MEMORY_BUDGET, Session
from transformer_viewer.model.capture.trace import Trace
from transformer_viewer.model.checkpoints.checkpoint import bundled_checkpoint_path, load_checkpoint
from transformer_viewer.model.decoder.families import family_name
from transformer_viewer.model.device import resolve_device, resolve_device_with_fallback
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels.packing import unpack_all
from transformer_viewer.model.sae.attached import AttachedSae
from transformer_viewer.viewer.gc_guard import freeze_startup_objects
from transformer_viewer.viewer.worker.requests import (
    Cancelled,
    DeviceRequest,
    LoadRequest,
    LoadResult,
    LogprobsRequest,
    LogprobsResult,
    ModelInfo,
    NewSession,
    PredictRequest,
    PredictResult,
    ProbeResult,
    TraceRequest,
    TraceResult,
)

MEMORY_BUDGET_ENV = "TV_MEMORY_BUDGET_MB"  # MiB of captured arrays one trace may hold


def memory_budget() -> tuple[int, str | None]:
    """The capture budget in bytes from $TV_MEMORY_BUDGET_MB (else the default), and a warning
    when the variable is set to something unusable (the default is used then)."""
    raw = os.environ.get(MEMORY_BUDGET_ENV, "").strip()
    if not raw:
        return DEFAULT_MEMORY_BUDGET, None
    try:
        mib = float(raw)
    except ValueError:
        mib = math.nan
    if not (math.isfinite(mib) and mib > 0):
        return DEFAULT_MEMORY_BUDGET, (f"{MEMORY_BUDGET_ENV}={raw!r} is not a positive number of MiB; using the "
                                       f"default of {DEFAULT_MEMORY_BUDGET >> 20} MiB")
    return max(1, int(mib * 2**20)), None


class WorkerSession(Session):
    """A Session plus what the viewer's handlers keep between requests.

    `scratch` is free for the other handlers (the lens keeps its results there); it is emptied
    whenever the prompt or the device changes, so nothing cached there outlives the activations
    it used.
    """

    def __init__(self, loaded, **kwargs):
        super().__init__(loaded, **kwargs)
        self.prompt_text: str | None = None  # the text last given to set_prompt
        self.clean: Trace | None = None  # unmasked trace of prompt_text
        self.masked: tuple[Intervention, Trace] | None = None  # (intervention, trace) of the last masked run
        self.scratch: dict = {}
        self.provenance: tuple = (None, "", None)  # (Fingerprint, tokenizer fingerprint, Environment) of the load

    def ensure_prompt(self, text: str) -> bool:
        """Tokenize `text` unless it is already the prompt; True when it changed."""
        if text == self.prompt_text and self.tokens is not None:
            return False
        self.prompt_text = None  # a failing set_prompt leaves no half-set prompt behind
        self.set_prompt(text)
        self.prompt_text = text
        self.forget()
        return True

    def prepare_analysis(self, text: str) -> None:
        """Make `text` the prompt with its layer cache filled: what the lens, scan and generation
        handlers start from."""
        self.ensure_prompt(text)
        if not self.tokens.ids:
            raise ModelError("the prompt is empty; type some text first")
        try:
            self.residuals()
        except ModelError:
            self.predict(None)  # fills the layer cache with one clean run

    def forget(self) -> None:
        self.clean = None
        self.masked = None
        self.scratch.clear()

    def info(self) -> ModelInfo:
        c, lm = self.config, self.loaded
        return ModelInfo(name=lm.name, format=lm.format, source=lm.source, n_layer=c.n_layer, n_head=c.n_head,
                         n_embd=c.n_embd, block_size=c.block_size, n_params=int(lm.n_params),
                         device=str(self.device), n_mlp=c.n_mlp, vocab_size=c.vocab_size,
                         family=family_name(c, lm.training), tokenizer=self.tokenizer.spec,
                         fingerprint=self.provenance[0], tokenizer_fingerprint=self.provenance[1],
                         environment=self.provenance[2])


def handle_probe(_session, _request, _progress, _is_cancelled) -> ProbeResult:
    if torch.cuda.is_available():
        return ProbeResult(True, torch.cuda.get_device_name(0))
    return ProbeResult(False)


def handle_load(session, request: LoadRequest, progress, is_cancelled) -> NewSession:
    path = request.path
    if path is None and not os.path.exists(bundled_checkpoint_path()):
        raise ModelError("the bundled model is not installed yet; open a checkpoint with File > Open checkpoint")
    what = f"loading {os.path.basename(os.path.normpath(path)) if path else 'the bundled model'}"
    progress(0, 0, f"{what}…")
    device, warning = resolve_device_with_fallback(request.device)
    freeze_startup_objects()  # before the first model: what lives now lives as long as the app
    # A newer load, the user's Cancel or closing the window stops it at the next tensor; the
    # model the worker had stays.
    report = progress_after_delay(progress, what + ": {stage} ({step} of {total} tensors)…")
    loaded = load_checkpoint(path, device=device, n_head=request.n_head, is_cancelled=is_cancelled,
                             progress=lambda done, total, stage: report(done, total, stage=stage))
    if session is not None:  # replaced once this returns: its packed copies need not wait beside the new ones
        unpack_all(session.model)
    budget, budget_warning = memory_budget()
    # Traces keep overviews and summaries; full patterns and activations are fetched on demand.
    # The session installs the inference kernels (weights packed once: the worker only reads them).
    session = WorkerSession(loaded, memory_budget=budget)
    session.provenance = provenance(loaded, progress)
    warning = "; ".join(w for w in (warning, budget_warning) if w) or None
    return NewSession(session, LoadResult(session.info(), warning))


def provenance(loaded, progress) -> tuple:
    """What a saved session records of this load: the checkpoint's fingerprint (taken once,
    here), the tokenizer's, and the environment computing its numbers."""
    from transformer_viewer.model.sessions.environment_part import current_environment
    from transformer_viewer.model.sessions.fingerprint import checkpoint_fingerprint, tokenizer_fingerprint

    progress(0, 0, f"fingerprinting {loaded.name}…")
    try:
        fingerprint = checkpoint_fingerprint(loaded.source)
        tokenizer = tokenizer_fingerprint(loaded.tokenizer.spec)
    except OSError:  # the files went away after the load: the session says so when it is saved
        fingerprint, tokenizer = None, ""
    return fingerprint, tokenizer, current_environment(loaded.model)


def handle_device(session: WorkerSession, request: DeviceRequest, progress, _is_cancelled) -> LoadResult:
    device = resolve_device(request.device)
    progress(0, 0, f"moving the model to {device}…")
    session.model.to(device)
    session.install_kernels()  # the kernels for the new device: back on the CPU, packed again
    for index, sae in list(session.saes.items()):  # an attached SAE computes beside the model: it moves too
        session.saes[index] = AttachedSae(sae.loaded, session.model)
    if session.tokens is not None:
        session.set_tokens(session.tokens)  # the ids and cached activations follow the model
    # Traces are numpy and still describe this prompt; only device-side caches are gone.
    session.masked = None
    session.scratch.clear()
    return LoadResult(session.info())


def _prediction_position(request: TraceRequest, T: int) -> int:
    """The requested position clamped to the prompt (None: the last token)."""
    return T - 1 if request.position is None else max(0, min(int(request.position), T - 1))


PROGRESS_AFTER_S = 0.3  # work shorter than this never shows a progress bar (nor a Cancel button)


def progress_after_delay(progress, text: str):
    """`report(done, total, **fields)` for model code: `progress(done, total, text)` once the
    work has taken PROGRESS_AFTER_S, `text` formatted with `step` (done + 1), `total` and `fields`."""
    t0 = time.perf_counter()

    def report(done: int, total: int, **fields) -> None:
        if time.perf_counter() - t0 >= PROGRESS_AFTER_S:
            progress(done, total, text.format(step=done + 1, total=total, **fields))

    return report


def handle_trace(session: WorkerSession, request: TraceRequest, progress, is_cancelled) -> TraceResult:
    """The clean trace of the prompt, and the one under the request's intervention when it changes
    anything (masked heads, feature clamps): the views first, the log-probabilities after (a
    LogprobsRequest). A long capture reports its layers and stops at the next one (the model
    raises `Cancelled`) when a newer trace request or the Cancel button cancels it."""
    t0, cpu0 = time.perf_counter(), time.thread_time()
    layers = progress_after_delay(progress, "computing layer {step} of {total}…")
    session.ensure_prompt(request.text)
    T = len(session.tokens.ids)
    if T == 0:
        raise ModelError("the prompt is empty; type some text first")
    position = _prediction_position(request, T)
    k = int(request.top_k)
    clean = session.clean
    if clean is None:
        # The views first; the log-probabilities follow as a LogprobsRequest. A newer request
        # for the same prompt (a head toggled meanwhile) starts from this clean run: it finishes.
        clean = session.run(None, None, position, k, logprobs=False, progress=layers,
                            is_cancelled=lambda: is_cancelled() and not _newer_needs(is_cancelled, request, False))
    elif clean.next.position != position or len(clean.next.top_ids) != k:
        # Same prompt, another prediction position: only the next-token distribution moves.
        nxt = session.predict(None, None, position, k, update_cache=False)
        clean = dataclasses.replace(clean, next=nxt)
    session.clean = clean
    change = request.intervention
    masked = change is not None and not change.is_empty
    if is_cancelled() and not (masked and _newer_needs(is_cancelled, request, True)):
        raise Cancelled  # superseded: the newer request takes it from here
    if not masked:
        trace = clean
    else:
        if session.masked is None or session.masked[0] != change:  # equal Interventions: the same run
            # The views first; the log-probabilities follow as a LogprobsRequest. A newer request
            # with the same mask (another query position) takes this trace as it is: it finishes.
            trace = session.run(change, None, position, k, logprobs=False, progress=layers,
                                is_cancelled=lambda: is_cancelled() and not _newer_needs(is_cancelled, request, True))
        else:
            trace = session.masked[1]
            if trace.next.position != position or len(trace.next.top_ids) != k:
                nxt = session.predict(change, None, position, k, update_cache=False)
                trace = dataclasses.replace(trace, next=nxt)
        session.masked = (change, trace)
        if is_cancelled():  # superseded while the masked run finished: the newer request takes it from here
            raise Cancelled
    return TraceResult(trace=trace, clean=clean, forward_ms=(time.perf_counter() - t0) * 1000.0,
                       compute_ms=(time.thread_time() - cpu0) * 1000.0)


def _newer_needs(is_cancelled, request: TraceRequest, masked: bool) -> bool:
    """Whether the request that superseded this one starts from what this one is computing:
    the clean run of the same prompt, or (`masked`) the masked run of the same prompt and
    intervention."""
    newer = getattr(is_cancelled, "newer", None)
    if newer is None or getattr(newer, "text", None) != request.text:
        return False
    if not masked:
        return True
    return getattr(newer, "intervention", None) == request.intervention


def handle_logprobs(session: WorkerSession, request: LogprobsRequest, progress, is_cancelled) -> LogprobsResult:
    """Fill in the per-token log-probabilities of the clean trace (if not yet there) and of the
    trace the request names: the masked one the last TraceRequest made, or the clean one."""
    vocabulary = progress_after_delay(progress, "log-probabilities of the prompt's tokens…")
    change = request.intervention
    clean = session.clean
    if request.text != session.prompt_text or clean is None:
        return LogprobsResult(None)  # another prompt since: a newer trace request handles it
    filled = None
    if clean.token_logprobs is None:
        logprobs = session.token_logprobs(clean, is_cancelled, vocabulary)
        if logprobs is None:
            raise Cancelled
        session.clean = filled = clean = dataclasses.replace(clean, token_logprobs=logprobs)
    if change is None or change.is_empty:
        return LogprobsResult(clean, filled)
    masked = session.masked
    if masked is None or masked[0] != change:
        return LogprobsResult(None, filled)  # another intervention since: a newer trace request handles it
    trace = masked[1]
    if trace.token_logprobs is None:
        logprobs = session.token_logprobs(trace, is_cancelled, vocabulary)
        if logprobs is None:
            raise Cancelled
        trace = dataclasses.replace(trace, token_logprobs=logprobs)
        session.masked = (masked[0], trace)
    return LogprobsResult(trace, filled)


def handle_predict(session: WorkerSession, request: PredictRequest, progress, is_cancelled) -> PredictResult:
    """The masked next-token distribution alone, from the cached clean run of the same prompt:
    only the layers from the first changed one, only up to the predicted position, no capture.
    It leaves the cache as it was, so the capture that follows still starts at that layer. A
    long one (an early layer of a long prompt) shows its layers and stops when superseded."""
    if request.text != session.prompt_text or session.clean is None or session.tokens is None:
        return PredictResult(None)  # no clean run of this prompt yet: the trace request does it all
    position = _prediction_position(request, len(session.tokens.ids))
    layers = progress_after_delay(progress, "predicting: layer {step} of {total}…")
    nxt = session.predict(request.intervention, None, position, int(request.top_k),
                          update_cache=False, progress=layers, is_cancelled=is_cancelled)
    return PredictResult(nxt)
