"""The session: a loaded model, its tokenizer and the current prompt, with the caches that make
head toggles cheap.

`Session.run(mask)` returns a frozen `Trace` (model/capture/trace.py); it caches every layer's
resid_pre, so a run whose head mask first differs from the cached one at layer l recomputes only
layers l.. and reuses everything before. `Session.predict` is the same without capture: just
the next-token distribution, for toggles and scans (`predict_many`: many masks as one batch).
`Session.masked_residuals` gives the residual streams under another mask without touching the
cache (the lens of a masked run). Those three live in session_predict.py. The corrupted prompt
of activation patching, and runs with patches, live in session_patching.py.

Hooks are registered for each forward (model/decoder/hooks.py) and always removed afterwards. What a
run writes into its trace is in capture_readers.py and overview.py, the unembedding's outputs in
unembedding.py, the memory budget in memory_budget.py; what a trace does not keep is recomputed
by on_demand.py from the residual streams cached here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.capture.capture_readers import (
    HeadFactors,
    finish_overviews,
    overview_poolers,
    readers,
    trace_arrays,
)
from transformer_viewer.model.capture.interventions import Intervention, as_intervention
from transformer_viewer.model.capture.layer_watch import attention_watch, layer_watch
from transformer_viewer.model.capture.memory_budget import (  # noqa: F401 (DEFAULT_MEMORY_BUDGET: the app's default)
    DEFAULT_MEMORY_BUDGET,
    KEPT_RUNS,
    capture_bytes,
    check_budget,
    check_cpu_work,
    max_tokens,
)
from transformer_viewer.model.capture.overview import cell_size, n_cells
from transformer_viewer.model.capture.session_patching import PatchedPredictions
from transformer_viewer.model.capture.session_predict import Predictions
from transformer_viewer.model.capture.session_saes import SaeAttachments
from transformer_viewer.model.capture.trace import Trace, resid_labels
from transformer_viewer.model.capture.unembedding import next_token, position_logits, token_logprobs
from transformer_viewer.model.checkpoints.checkpoint import LoadedModel
from transformer_viewer.model.decoder.hooks import caching, hooks, reading, unread
from transformer_viewer.model.errors import Cancelled, ModelError
from transformer_viewer.model.kernels.inference import InstalledInference, install_inference
from transformer_viewer.model.tokenizers.tokenizer import Tokenized

_RUN_IDS = itertools.count(1)  # unique in the process, so no session mistakes another's trace for its own


@dataclass
class _Run:
    """What recomputing a run's activations starts from: its residual stream and what it changed."""

    resid: list  # resid_pre of each layer, then the final resid_post, (1, T, C) each
    intervention: Intervention


class Session(Predictions, PatchedPredictions, SaeAttachments):
    """A model, a tokenizer and the current prompt, with the caches that make edits cheap.

    Not thread-safe: the viewer keeps one on its worker thread.
    """

    def __init__(self, loaded: LoadedModel, tokenizer=None,
                 pattern_dtype=np.float16, memory_budget: int = DEFAULT_MEMORY_BUDGET, keep_full: bool = False):
        self.loaded = loaded
        self.keep_full = keep_full  # also keep every (T, T) pattern and (T, n_mlp) activation in the trace
        self.model = loaded.model.eval()
        self.config = loaded.config
        self.no_change = Intervention.none(self.config)  # the clean run's Intervention
        self.tokenizer = tokenizer or loaded.tokenizer  # the model's own (GPT-2's unless it brought one)
        self.pattern_dtype = np.dtype(pattern_dtype)
        self.memory_budget = memory_budget
        self.n_vocab = min(self.config.vocab_size, self.tokenizer.n_vocab)  # padded rows are ignored
        self.tokens: Tokenized | None = None
        self.dropped = 0
        self._ids: torch.Tensor | None = None  # (1, T)
        self._head_factors = HeadFactors()  # per-head factors of c_proj, for the head norms
        self.install_kernels()
        self._runs: OrderedDict[int, _Run] = OrderedDict()  # run id -> what recomputation starts from
        self.recompute_cache: dict = {}  # for model.on_demand; emptied with the runs it was made from
        self._init_saes()  # the SAEs held beside the model (session_saes.py)
        self._clear_cache()

    # -- prompt ---------------------------------------------------------------------------
    def set_prompt(self, text: str) -> Tokenized:
        """Tokenize; a prompt longer than block_size keeps its last block_size tokens."""
        # Labels and spans only for the kept tokens: a 1 MB paste costs ~0.2 s here, not seconds.
        tok, dropped = self.tokenizer.tokenize_last(text, self.config.block_size)
        self.set_tokens(tok)
        self.dropped = dropped
        return tok

    def set_tokens(self, tok: Tokenized) -> None:
        tok = self._checked_tokens(tok)
        self.tokens = tok
        self._ids = torch.tensor([tok.ids], dtype=torch.long, device=self.device)  # (1, T)
        self.clear_corrupted()  # a clean and a corrupted prompt are set as a pair
        self._clear_cache()

    def install_kernels(self) -> InstalledInference:
        """Install the inference kernels for the model where its weights are now
        (model/kernels/inference.py): once at the start, again after the model moves device.
        Every run of the session takes them, so captures, predictions and scans agree exactly."""
        before = getattr(self, "inference", None)
        self.inference = install_inference(self.model)
        if self.inference is before:  # the same kernels where the weights now are: packed again for them
            self.inference.repack()
        return self.inference

    @property
    def kernel_path(self) -> str:
        """The kernels this session's results come from (`InferenceStrategy.kernel_path`): what
        an export or a saved session records beside them."""
        return self.inference.kernel_path

    def _checked_tokens(self, tok: Tokenized) -> Tokenized:
        """`tok` once known to fit the model (context and vocabulary), its special tokens marked."""
        if len(tok.ids) > self.config.block_size:
            raise ModelError(f"{len(tok.ids)} tokens do not fit the model's context of {self.config.block_size}")
        if tok.ids and max(tok.ids) >= self.config.vocab_size:
            raise ModelError(f"token id {max(tok.ids)} is outside this model's vocabulary of {self.config.vocab_size}")
        if len(tok.special) != len(tok.ids):
            tok = dataclasses.replace(tok, special=tuple(self.tokenizer.is_special(i) for i in tok.ids))
        return tok

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _clear_cache(self) -> None:
        self._resid: list[torch.Tensor] | None = None  # resid_pre of each layer, then the final resid_post
        # What the cached run changed: its residual stream is current for an equal Intervention.
        self._cached_intervention: Intervention | None = None
        self._cached_trace: Trace | None = None
        self._runs.clear()
        self.recompute_cache.clear()

    def _require_prompt(self) -> torch.Tensor:
        if self._ids is None or self._ids.shape[1] == 0:
            raise ModelError("the prompt is empty; type some text first")
        return self._ids

    def _intervention(self, intervention, ablation: str | None) -> Intervention:
        # A bare mask (and ablation) from a script becomes an Intervention through the one
        # constructor; an Intervention passes as it is, once known to be for this model.
        if intervention is None and ablation is None:
            return self.no_change
        return as_intervention(self.config, intervention, ablation)

    def _position(self, position: int | None, T: int) -> int:
        p = T - 1 if position is None else int(position)
        if p < 0:
            p += T
        if not 0 <= p < T:
            raise ModelError(f"position {position} is outside the prompt's {T} tokens")
        return p

    def estimate_bytes(self, T: int) -> int:
        """Bytes a capture of T tokens keeps (model/capture/memory_budget.py)."""
        return capture_bytes(self.config, T, self.pattern_dtype, self.n_vocab, self.keep_full)

    def max_tokens_within_budget(self) -> int:
        """The longest prompt whose capture fits the budget (0: not even one token)."""
        return max_tokens(self.estimate_bytes, self.memory_budget, self.config.block_size)

    # -- capture --------------------------------------------------------------------------
    @torch.inference_mode()
    def run(self, intervention: Intervention | None = None, ablation: str | None = None,
            position: int | None = None, top_k: int = 10, logprobs: bool = True, progress=None,
            is_cancelled=None) -> Trace:
        """Capture under `intervention` (None: the clean run), reusing cached layers before the
        first changed one. A script may pass a bare (L, nh) mask and `ablation` instead; they are
        made into an Intervention by `Intervention.make`.

        `logprobs=False` leaves `token_logprobs` None (the unembedding at every position is the
        costliest part of a late-layer toggle); `token_logprobs(trace)` computes them later.
        `progress(layer, n_layer)` hears of each layer as it starts; once `is_cancelled()` is
        true the run raises `Cancelled` at the next layer boundary, residual midpoint or block of
        query rows (model/capture/layer_watch.py), and the session is as it was before the call.
        """
        ids = self._require_prompt()
        change = self._intervention(intervention, ablation)
        T = ids.shape[1]
        self._check_budget(T)
        p = self._position(position, T)
        start = self._start_layer(change, self._cached_trace is not None)
        t0 = time.perf_counter()
        L = self.config.n_layer
        arrays = trace_arrays(self.config, T, n_cells(T), start, self.pattern_dtype, self.keep_full,
                              self._cached_trace if start > 0 else None)
        resid_names = [f"blocks.{layer}.hook_resid_pre" for layer in range(start, L)]
        poolers = overview_poolers(self.config.n_head, T, range(start, L), self.device, arrays, self.keep_full)
        # Overviews pooled from the blocks of pattern rows as they pass; with keep_full, from
        # the whole pattern the trace keeps anyway.
        observers = attention_watch(range(start, L), is_cancelled, {} if self.keep_full else poolers)
        with (self._scratch_attention(), hooks(self.model, self.intervention_hooks(change, start)),
              self.inference.observing(observers),
              reading(self.model, readers(self.model, arrays, start, self._head_factors, self.keep_full, poolers)
                      + layer_watch(start, L, progress, is_cancelled)),
              caching(self.model, resid_names) as kept):
            x = self.model.embed(ids) if start == 0 else self._resid[start]
            final = self.model.run_blocks(x, start)
        finish_overviews(poolers, arrays, T, self.keep_full)
        new_resid = list(self._resid) if start > 0 and self._resid else [None] * (L + 1)
        for layer in range(start, L):
            new_resid[layer] = kept[f"blocks.{layer}.hook_resid_pre"]
        new_resid[L] = final
        if logprobs:
            token_lp, logits_p, logprobs_p = token_logprobs(self.model, final[0], ids[0], p, self.n_vocab, is_cancelled)
            if token_lp is None:
                raise Cancelled
        else:
            token_lp, (logits_p, logprobs_p) = None, position_logits(self.model, final[0, p], self.n_vocab)
        nxt = next_token(logits_p, logprobs_p, p, top_k)
        elapsed = (time.perf_counter() - t0) * 1000.0
        self._resid, self._cached_intervention = new_resid, change
        run_id = self._keep_run(_Run(new_resid, change))
        tok = self.tokens
        trace = Trace(
            token_ids=np.asarray(tok.ids, dtype=np.int64), labels=tok.labels, spans=tok.spans, text=tok.text,
            dropped_tokens=self.dropped, overview_cell=cell_size(T), resid_labels=resid_labels(L),
            token_logprobs=token_lp, next=nxt, intervention=change, forward_ms=elapsed,
            first_layer_run=start, run_id=run_id, special=tok.special, **arrays,
        )
        self._cached_trace = trace
        return trace

    def _keep_run(self, run: _Run) -> int:
        run_id = next(_RUN_IDS)
        self._runs[run_id] = run
        while len(self._runs) > KEPT_RUNS:
            self._runs.popitem(last=False)
        return run_id

    def _check_trace(self, trace: Trace) -> None:
        if self._ids is None or not np.array_equal(trace.token_ids, self._ids[0].cpu().numpy()):
            raise ModelError("that trace is of another prompt than the session's; run the prompt again")

    @torch.inference_mode()
    def resid_pre(self, trace: Trace, layer: int) -> torch.Tensor:
        """The residual stream entering `layer` (L: the final one) in the run that made `trace`,
        (1, T, C): from the cache while the run is kept, else recomputed under its mask."""
        self._check_trace(trace)
        L = self.config.n_layer
        if not 0 <= layer <= L:
            raise ModelError(f"layer {layer} does not exist; the model has layers 0..{L - 1}")
        run = self._runs.get(trace.run_id)
        if run is not None:
            self._runs.move_to_end(trace.run_id)
            return run.resid[layer]
        model = self.model
        with self._scratch_attention(), hooks(model, self.intervention_hooks(trace.intervention, 0)):
            return model.run_blocks(model.embed(self._ids), 0, layer)

    @torch.inference_mode()
    def token_logprobs(self, trace: Trace, is_cancelled=None, progress=None) -> np.ndarray | None:
        """(T,) log p(token t | tokens < t) of the run that made `trace` (NaN at t = 0);
        None when `is_cancelled()` turned true part way. `progress(done, total)` counts the
        vocabulary's tokens done."""
        final = self.resid_pre(trace, self.config.n_layer)
        token_lp, _, _ = token_logprobs(self.model, final[0], self._ids[0], 0, self.n_vocab, is_cancelled, progress)
        return token_lp

    def _check_budget(self, T: int) -> None:
        check_budget(self.estimate_bytes, self.memory_budget, self.config.block_size, T)
        if self.device.type == "cpu":  # a GPU does this work in seconds; the memory budget bounds it there
            check_cpu_work(self.config, T)

    def _scratch_attention(self):
        """Patterns read whole (`keep_full`) built in the kernels' one workspace, unless a hook
        from outside the session could keep a pattern (then each layer gets its own tensor)."""
        if unread(*(b.attn.hook_pattern for b in self.model.blocks)):
            return self.inference.scratch_patterns()
        return contextlib.nullcontext()

    def _start_layer(self, change: Intervention, have_cache: bool) -> int:
        if not have_cache or self._resid is None or self._cached_intervention is None:
            return 0
        if change == self._cached_intervention:
            return self.config.n_layer
        return min(change.first_changed_layer(self._cached_intervention),
                   self._clamps_start(change, self._cached_intervention))

    def residuals(self) -> list[torch.Tensor]:
        """resid_pre of every layer, then the final resid_post, for the cached run (1, T, C)."""
        if self._resid is None:
            raise ModelError("no run yet; call run() first")
        return list(self._resid)

