"""The run controller: the one place a change of the viewer's state becomes work for the model.

The window, `transformer-viewer export` and the tests share it. It listens to the state (prompt,
intervention, selected position), sends the worker a `TraceRequest` for the run as the state is
now, installs the answer with `state.set_traces`, and then asks for the prompt's
log-probabilities (`LogprobsRequest`): the views draw first, the token strip's surprisal
follows. A head toggle first asks for the masked prediction alone (`PredictRequest`), the quick
answer the next-token panel shows while the capture runs.

What the answers mean for the window's widgets (the status bar's timings, a notice under the
prompt, the preview in the next-token panel) leaves here as signals; the controller touches no
widget. With an `InlineWorker` (export, tests) every request is answered before `submit`
returns, so `run()` leaves the state holding the trace with its log-probabilities; such callers
make the controller with `follow=False` and call `run()` themselves, so that an error reaches
them (Qt does not pass an exception raised in a slot back to the signal's emitter).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from transformer_viewer.viewer.worker.requests import LogprobsRequest, PredictRequest, TraceRequest

TOP_K = 10  # next-token candidates each run returns


class RunController(QObject):
    """Turns `state` changes into requests to `worker` and its answers into state.

    `hold_prompt()`: True while a prompt set from elsewhere must not run yet (the window: while
    the user's own keystrokes wait for their debounce; they run then, and win). `follow`: run
    on every change of the state's prompt, intervention and position (False: only on `run()`)."""

    traced = Signal(object)  # TraceResult: the views' run landed (the status bar shows its timings)
    preview = Signal(object, object)  # (NextToken, Intervention): the quick prediction of a toggle
    failed = Signal(str)  # one line: a run failed
    cancelled = Signal()  # a run was cancelled
    needs_prompt = Signal()  # a run was asked for with no prompt to run

    def __init__(self, state, worker, parent: QObject | None = None, top_k: int = TOP_K,
                 hold_prompt: Callable[[], bool] = lambda: False, follow: bool = True):
        super().__init__(parent)
        self.state = state
        self.worker = worker
        self.top_k = top_k
        self.hold_prompt = hold_prompt
        self._requested_position: int | None = None  # the position the newest trace was asked at
        if follow:
            state.prompt_changed.connect(self._on_prompt)
            state.mask_changed.connect(self._on_mask)
            state.selection_changed.connect(self._on_selection)

    # -- what runs ------------------------------------------------------------------------
    def run(self) -> None:
        """Trace the prompt under the state's intervention at its selected position, then fill
        in the log-probabilities. Nothing without a model; `needs_prompt` without a prompt."""
        st = self.state
        if st.model_info is None:
            return
        if not st.prompt:
            self.needs_prompt.emit()
            return
        self._requested_position = st.query
        self.worker.submit(self._request(TraceRequest), on_result=self._on_traced, on_failure=self._on_failed)

    def _request(self, request_type: type[TraceRequest]) -> TraceRequest:
        """A run of the prompt, intervention and position as they are now (a trace, or a prediction)."""
        st = self.state
        return request_type(text=st.prompt, intervention=st.intervention, position=st.query, top_k=self.top_k)

    # -- state -> requests ----------------------------------------------------------------
    def _on_prompt(self, _text: str) -> None:
        if not self.hold_prompt():
            self.run()

    def _on_mask(self, _mask) -> None:
        if self._worth_preview():
            self.worker.submit(self._request(PredictRequest), on_result=self._on_predicted, on_failure=self._on_failed)
        self.run()

    def _on_selection(self) -> None:
        st = self.state
        if st.trace is not None and st.query != self._requested_position:
            self.run()  # the prediction follows the selected token

    def _worth_preview(self) -> bool:
        """Whether a head toggle should first ask for the prediction alone: only when there is a
        run to compare against and the new one changes something (a clean run is cached)."""
        st = self.state
        return st.model_info is not None and st.trace is not None and bool(st.prompt) \
            and not st.intervention.is_empty

    # -- answers -> state -----------------------------------------------------------------
    def _on_traced(self, answer) -> None:
        value = answer.value
        self.state.set_traces(value.trace, value.clean)
        self.traced.emit(value)
        if value.trace.token_logprobs is None:  # the second pass: surprisal follows the views
            traced = answer.request
            self.worker.submit(LogprobsRequest(text=traced.text, intervention=traced.intervention,
                                               position=traced.position, top_k=traced.top_k),
                               on_result=self._on_logprobs, on_failure=self._on_failed)

    def _on_logprobs(self, answer) -> None:
        value, st = answer.value, self.state
        if st.trace is None:
            return
        clean = st.clean_trace
        if value.clean is not None and clean is not None and clean.run_id == value.clean.run_id:
            clean = value.clean
        if st.trace is st.clean_trace:  # the clean trace on screen: it stays one object
            trace = clean
        elif value.trace is not None and st.trace.run_id == value.trace.run_id:
            trace = value.trace
        else:
            trace = st.trace  # an answer for a run no longer shown
        st.set_traces(trace, clean)

    def _on_predicted(self, answer) -> None:
        """Show the quick prediction when it answers the state as it is now and the views have
        not caught up with it already (a trace of the same intervention may have come first)."""
        request, value, st = answer.request, answer.value, self.state
        if value.next is None or st.trace is None:
            return
        if request.text != st.prompt or request.intervention != st.intervention:
            return
        if st.trace.intervention == st.intervention:
            return
        self.preview.emit(value.next, request.intervention)

    def _on_failed(self, failure) -> None:
        if failure.cancelled:
            self.cancelled.emit()
        else:
            self.failed.emit(failure.message)
