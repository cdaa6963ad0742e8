"""The session: a loaded model, its tokenizer and the current prompt, with the caches that make
head toggles cheap.

`Session.run(mask)` returns a frozen `Trace` (model/trace.py); it caches every layer's
resid_pre, so a run whose head mask first differs from the cached one at layer l recomputes only
layers l.. and reuses everything before. `Session.predict` is the same without capture: just
the next-token distribution, for toggles and scans. `Session.masked_residuals` gives the
residual streams under another mask without touching the cache (the lens of a masked run).

Hooks are registered for each forward (model/hooks.py) and always removed afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch.nn.modules import module as _torch_module

from transformer_viewer.model.checkpoint import LoadedModel
from transformer_viewer.model.errors import CaptureTooLargeError, ModelError
from transformer_viewer.model.gpt import AttentionWorkspace, attention_workspace, observe_pattern_rows
from transformer_viewer.model.hooks import caching, hooks, reading
from transformer_viewer.model.interventions import check_intervention, first_changed_layer, head_mask_hooks
from transformer_viewer.model.linear import linear
from transformer_viewer.model.overview import OverviewPooler, cell_size, n_cells
from transformer_viewer.model.tokenizer import Tokenized
from transformer_viewer.model.trace import NextToken, Trace, resid_labels

DEFAULT_MEMORY_BUDGET = 4 << 30  # bytes of captured arrays one trace may hold
VOCAB_BLOCK = 2048  # vocabulary rows the unembedding computes at once
KEPT_RUNS = 3  # runs whose residual streams stay cached for recomputation (clean, masked, one more)
_RUN_IDS = itertools.count(1)  # unique in the process, so no session mistakes another's trace for its own


@dataclass
class _Run:
    """What recomputing a run's activations starts from: its residual stream and its mask."""

    resid: list  # resid_pre of each layer, then the final resid_post, (1, T, C) each
    mask: np.ndarray
    ablation: str


class Session:
    """A model, a tokenizer and the current prompt, with the caches that make edits cheap.

    Not thread-safe: the viewer keeps one on its worker thread.
    """

    def __init__(self, loaded: LoadedModel, tokenizer=None,
                 pattern_dtype=np.float16, memory_budget: int = DEFAULT_MEMORY_BUDGET, keep_full: bool = False):
        self.loaded = loaded
        self.keep_full = keep_full  # also keep every (T, T) pattern and (T, n_mlp) activation in the trace
        self.model = loaded.model.eval()
        self.config = loaded.config
        self.tokenizer = tokenizer or loaded.tokenizer  # the model's own (GPT-2's unless it brought one)
        self.pattern_dtype = np.dtype(pattern_dtype)
        self.memory_budget = memory_budget
        self.n_vocab = min(self.config.vocab_size, self.tokenizer.n_vocab)  # padded rows are ignored
        self.tokens: Tokenized | None = None
        self.dropped = 0
        self._ids: torch.Tensor | None = None  # (1, T)
        self._grams: dict[int, tuple[tuple, torch.Tensor]] = {}  # layer -> (weight key, per-head Gram)
        self._workspace = AttentionWorkspace()  # attention scores, reused across layers and runs
        self._runs: OrderedDict[int, _Run] = OrderedDict()  # run id -> what recomputation starts from
        self.recompute_cache: dict = {}  # for model.on_demand; emptied with the runs it was made from
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
        if len(tok.ids) > self.config.block_size:
            raise ModelError(f"{len(tok.ids)} tokens do not fit the model's context of {self.config.block_size}")
        if tok.ids and max(tok.ids) >= self.config.vocab_size:
            raise ModelError(f"token id {max(tok.ids)} is outside this model's vocabulary of {self.config.vocab_size}")
        if len(tok.special) != len(tok.ids):
            tok = dataclasses.replace(tok, special=tuple(self.tokenizer.is_special(i) for i in tok.ids))
        self.tokens = tok
        self._ids = torch.tensor([tok.ids], dtype=torch.long, device=self.device)  # (1, T)
        self._clear_cache()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _clear_cache(self) -> None:
        self._resid: list[torch.Tensor] | None = None  # resid_pre of each layer, then the final resid_post
        self._cached_mask: np.ndarray | None = None
        self._cached_ablation = "zero"
        self._cached_trace: Trace | None = None
        self._runs.clear()
        self.recompute_cache.clear()

    def _require_prompt(self) -> torch.Tensor:
        if self._ids is None or self._ids.shape[1] == 0:
            raise ModelError("the prompt is empty; type some text first")
        return self._ids

    def _check(self, mask, ablation: str) -> np.ndarray:
        return check_intervention(self.config, mask, ablation)

    def _position(self, position: int | None, T: int) -> int:
        p = T - 1 if position is None else int(position)
        if p < 0:
            p += T
        if not 0 <= p < T:
            raise ModelError(f"position {position} is outside the prompt's {T} tokens")
        return p

    def estimate_bytes(self, T: int) -> int:
        """Bytes a capture of T tokens keeps: the trace's arrays, the cached residual streams of
        the runs kept for recomputation, and the largest block of pattern rows held at once."""
        c = self.config
        L, nh, C = c.n_layer, c.n_head, c.n_embd
        item = self.pattern_dtype.itemsize
        n = n_cells(T)
        trace = (2 * L * nh * n * n * item  # overviews
                 + L * c.n_mlp * (4 + 8 + 4)  # MLP summaries
                 + (L * nh + 2 * L + 2 + 1) * T * 4 + T * 8  # head and residual norms, log-probs, ids
                 + self.n_vocab * 4)  # next-token distribution
        if self.keep_full:
            trace += L * nh * T * T * item + L * T * c.n_mlp * item
        resid = KEPT_RUNS * (L + 1) * T * C * 4
        rows = nh * 96 * T * 4 * 2  # one block of pattern rows and its softmax input
        qk = 2 * T * C * 4  # one layer's queries and keys, kept while its tiles are asked for
        return trace + resid + rows + qk

    def max_tokens_within_budget(self) -> int:
        """The longest prompt whose capture fits the budget (0: not even one token)."""
        if self.estimate_bytes(1) > self.memory_budget:
            return 0
        lo, hi = 1, self.config.block_size
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.estimate_bytes(mid) <= self.memory_budget else (lo, mid - 1)
        return lo

    # -- capture --------------------------------------------------------------------------
    @torch.inference_mode()
    def run(self, mask=None, ablation: str = "zero", position: int | None = None, top_k: int = 10,
            logprobs: bool = True) -> Trace:
        """Capture under `mask`, reusing cached layers before the first changed one.

        `logprobs=False` leaves `token_logprobs` None (the unembedding at every position is the
        costliest part of a late-layer toggle); `token_logprobs(trace)` computes them later.
        """
        ids = self._require_prompt()
        mask = self._check(mask, ablation)
        T = ids.shape[1]
        self._check_budget(T)
        p = self._position(position, T)
        start = self._start_layer(mask, ablation, self._cached_trace is not None)
        t0 = time.perf_counter()
        L = self.config.n_layer
        arrays = self._trace_arrays(T, start)
        resid_names = [f"blocks.{layer}.hook_resid_pre" for layer in range(start, L)]
        # A prompt of at most MAX_CELLS tokens is its own overview: with the full patterns kept,
        # the trace shares them instead of pooling 1 x 1 cells (a copy of every pattern).
        share = self.keep_full and cell_size(T) == 1
        poolers = {} if share else {layer: OverviewPooler(self.config.n_head, T, self.device)
                                    for layer in range(start, L)}
        # Overviews pooled from the blocks of pattern rows as they pass; with keep_full, from
        # the whole pattern the trace keeps anyway.
        observers = {} if self.keep_full else poolers
        with (self._scratch_attention(), hooks(self.model, head_mask_hooks(mask, ablation, start)),
              observe_pattern_rows(self.model, observers),
              reading(self.model, self._readers(arrays, start, poolers)), caching(self.model, resid_names) as kept):
            x = self.model.embed(ids) if start == 0 else self._resid[start]
            final = self.model.run_blocks(x, start)
        for layer, pooler in poolers.items():
            pooler.finish(arrays["overview_max"][layer], arrays["overview_mean"][layer])
        if share:
            arrays["overview_max"] = arrays["overview_mean"] = arrays["attention"]
        new_resid = list(self._resid) if start > 0 and self._resid else [None] * (L + 1)
        for layer in range(start, L):
            new_resid[layer] = kept[f"blocks.{layer}.hook_resid_pre"]
        new_resid[L] = final
        if logprobs:
            token_lp, logits_p, logprobs_p = self._token_logprobs(final[0], ids[0], p)
        else:
            token_lp = None
            logits_p = self.model.unembed(final[0, p]).float()[: self.n_vocab]  # (V,)
            logprobs_p = torch.log_softmax(logits_p, dim=-1)
        nxt = _next_token(logits_p, logprobs_p, p, top_k)
        elapsed = (time.perf_counter() - t0) * 1000.0
        self._resid, self._cached_mask, self._cached_ablation = new_resid, mask.copy(), ablation
        run_id = self._keep_run(_Run(new_resid, mask.copy(), ablation))
        tok = self.tokens
        trace = Trace(
            token_ids=np.asarray(tok.ids, dtype=np.int64), labels=tok.labels, spans=tok.spans, text=tok.text,
            dropped_tokens=self.dropped, overview_cell=cell_size(T), resid_labels=resid_labels(L),
            token_logprobs=token_lp, next=nxt, mask=mask.copy(), ablation=ablation, forward_ms=elapsed,
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
        with self._scratch_attention(), hooks(model, head_mask_hooks(trace.mask, trace.ablation, 0)):
            return model.run_blocks(model.embed(self._ids), 0, layer)

    @torch.inference_mode()
    def token_logprobs(self, trace: Trace, is_cancelled=None) -> np.ndarray | None:
        """(T,) log p(token t | tokens < t) of the run that made `trace` (NaN at t = 0);
        None when `is_cancelled()` turned true part way."""
        final = self.resid_pre(trace, self.config.n_layer)
        token_lp, _, _ = self._token_logprobs(final[0], self._ids[0], 0, is_cancelled)
        return token_lp

    def _check_budget(self, T: int) -> None:
        if self.estimate_bytes(T) <= self.memory_budget:
            return
        fits = self.max_tokens_within_budget()
        advice = (f"shorten the prompt to {fits} tokens or fewer" if fits else
                  "not even one token fits; raise the memory budget")
        raise CaptureTooLargeError(f"capturing {T} tokens needs about {_size(self.estimate_bytes(T))}, over the "
                                   f"{_size(self.memory_budget)} budget; {advice}")

    def _trace_arrays(self, T: int, start: int) -> dict[str, np.ndarray]:
        """The arrays of a new trace by field name, holding the cached trace's values for the
        layers before `start` (the rest are written by the run)."""
        c = self.config
        L, nh, n = c.n_layer, c.n_head, n_cells(T)
        arrays = {
            "overview_max": np.empty((L, nh, n, n), dtype=self.pattern_dtype),
            "overview_mean": np.empty((L, nh, n, n), dtype=self.pattern_dtype),
            "mlp_max": np.empty((L, c.n_mlp), dtype=np.float32),
            "mlp_argmax": np.empty((L, c.n_mlp), dtype=np.int64),
            "mlp_mean": np.empty((L, c.n_mlp), dtype=np.float32),
            "head_norms": np.empty((L, nh, T), dtype=np.float32),
        }
        if self.keep_full:
            arrays["attention"] = np.empty((L, nh, T, T), dtype=self.pattern_dtype)
            arrays["mlp_post"] = np.empty((L, T, c.n_mlp), dtype=self.pattern_dtype)
        norms = np.empty((2 * L + 2, T), dtype=np.float32)
        prev = self._cached_trace
        if start > 0 and prev is not None:
            # Copies, never shared: the previous trace may still be on screen.
            for name, dest in arrays.items():
                dest[:start] = getattr(prev, name)[:start]
            rows = 2 * L + 2 if start >= L else 1 + 2 * start
            norms[:rows] = prev.resid_norms[:rows]
        arrays["resid_norms"] = norms
        return arrays

    def _readers(self, arrays: dict[str, np.ndarray], start: int, poolers: dict) -> list[tuple[str, object]]:
        """(hook point, reader) pairs that write layers start.. of a run into the trace's arrays."""
        norms = arrays["resid_norms"]
        L = self.config.n_layer
        readers = [("hook_embed", partial(_store_norm, norms[0]))] if start == 0 else []
        for layer in range(start, L):
            b = f"blocks.{layer}"
            readers += [
                (f"{b}.hook_resid_pre", partial(_store_norm, norms[1 + 2 * layer])),
                (f"{b}.hook_resid_mid", partial(_store_norm, norms[2 + 2 * layer])),
                (f"{b}.attn.hook_z", partial(_store_head_norms, self._head_gram(layer), arrays["head_norms"][layer])),
                (f"{b}.mlp.hook_post", partial(_summarize_mlp, layer, arrays)),
            ]
            if self.keep_full:
                readers += [
                    (f"{b}.attn.hook_pattern", partial(_store, arrays["attention"][layer])),
                    (f"{b}.mlp.hook_post", partial(_store, arrays["mlp_post"][layer])),
                ]
                if layer in poolers:
                    readers.append((f"{b}.attn.hook_pattern", partial(poolers[layer], 0)))
        readers.append((f"blocks.{L - 1}.hook_resid_post", partial(_store_norm, norms[2 * L + 1])))
        return readers

    def _scratch_attention(self):
        """Attention in the session's reusable workspace, unless a hook from outside the session
        could keep a pattern (then each layer gets its own tensor, as in a plain forward)."""
        foreign = _torch_module._global_forward_hooks or _torch_module._global_forward_pre_hooks or any(
            b.attn.hook_pattern._forward_hooks or b.attn.hook_pattern._forward_pre_hooks for b in self.model.blocks)
        return contextlib.nullcontext() if foreign else attention_workspace(self.model, self._workspace)

    def _token_logprobs(self, final: torch.Tensor, ids: torch.Tensor, p: int, is_cancelled=None):
        """log p(token t | < t) for every t, and the logits and log-probs at position p.

        The unembedding runs over blocks of the vocabulary with a running log-sum-exp: the
        (T, V) logits (200 MB at 1024 tokens) never exist at once, and a (T, 2048) block still
        in cache when it is reduced makes the whole thing about a third faster than one GEMM.
        """
        model = self.model
        T = final.shape[0]
        h = model.hook_final(model.ln_f(final))  # (T, C)
        w = model.lm_head.weight[: self.n_vocab]  # (V, C); padded rows never count
        bias = model.lm_head.bias
        V = w.shape[0]
        targets = ids[1:]  # (T-1,), the token each position predicts
        picked = torch.zeros(T - 1, dtype=torch.float32, device=h.device)  # logit of each target
        logits_p = torch.empty(V, dtype=torch.float32, device=h.device)
        starts = range(0, V, VOCAB_BLOCK)
        lse = torch.empty(len(starts), T, dtype=torch.float32, device=h.device)  # (blocks, T)
        for j, v0 in enumerate(starts):
            if is_cancelled is not None and is_cancelled():
                return None, None, None
            v1 = min(v0 + VOCAB_BLOCK, V)
            block = model.cap_logits(linear(h, w[v0:v1], None if bias is None else bias[v0:v1])).float()  # (T, v1 - v0)
            # log-sum-exp as x0 - log_softmax(x)0: one fused kernel instead of five passes.
            lse[j] = block[:, 0] - torch.log_softmax(block, dim=-1)[:, 0]
            logits_p[v0:v1] = block[p]
            rows = ((targets >= v0) & (targets < v1)).nonzero().squeeze(1)
            picked[rows] = block[rows, targets[rows] - v0]
        lse = torch.logsumexp(lse, dim=0)  # (T,)
        token_lp = torch.full((T,), float("nan"), dtype=torch.float32)
        token_lp[1:] = (picked - lse[:-1]).cpu()
        return token_lp.numpy(), logits_p, logits_p - lse[p]

    def _head_gram(self, layer: int) -> torch.Tensor:
        """(nh, hs, hs) W_h W_h^T of each head's slice of c_proj, cached while the weight is unchanged."""
        c = self.config
        w_o = self.model.blocks[layer].attn.c_proj.weight  # (C, nh * hs): out = z_flat @ w_o.T
        key = (w_o.data_ptr(), w_o._version, w_o.dtype, w_o.device)
        cached = self._grams.get(layer)
        if cached is not None and cached[0] == key:
            return cached[1]
        w_heads = w_o.T.reshape(c.n_head, c.head_size, c.n_embd).double()  # (nh, hs, C)
        # Built in float64 once, so the only float32 rounding is in the per-run quadratic form.
        gram = (w_heads @ w_heads.transpose(1, 2)).to(torch.float32)  # (nh, hs, hs)
        self._grams[layer] = (key, gram)
        return gram

    def _start_layer(self, mask: np.ndarray, ablation: str, have_cache: bool) -> int:
        if not have_cache or self._resid is None or self._cached_mask is None:
            return 0
        return first_changed_layer(self._cached_mask, self._cached_ablation, mask, ablation)

    # -- prediction only ------------------------------------------------------------------
    @torch.inference_mode()
    def predict(self, mask=None, ablation: str = "zero", position: int | None = None, top_k: int = 10,
                update_cache: bool = True) -> NextToken:
        """The next-token distribution under `mask`, computing as little as possible: layers
        from the first changed one, positions up to `position` (zero ablation is causal), and
        the head at one position. `update_cache=False` leaves the cache as it was (scans)."""
        ids = self._require_prompt()
        mask = self._check(mask, ablation)
        T = ids.shape[1]
        p = self._position(position, T)
        model, L = self.model, self.config.n_layer
        if self._resid is None:
            self.run(None, "zero", p, top_k)  # a clean run fills the cache once
        start = self._start_layer(mask, ablation, True)
        if start >= L:
            final = self._resid[L]
        else:
            # Under zero ablation nothing after `position` can reach it; mean ablation
            # averages over every position, so it needs them all.
            keep = p + 1 if ablation == "zero" else T
            if update_cache and keep == T:
                new_resid = self._rerun(mask, ablation, start)
                final = new_resid[L]
                self._resid, self._cached_mask, self._cached_ablation = new_resid, mask.copy(), ablation
                self._cached_trace = None  # its arrays no longer match the cache: the next run() is a full one
            else:
                with self._scratch_attention(), hooks(model, head_mask_hooks(mask, ablation, start)):
                    final = model.run_blocks(self._resid[start][:, :keep], start)
        logits = model.unembed(final[0, p]).float()[: self.n_vocab]  # (V,)
        return _next_token(logits, torch.log_softmax(logits, dim=-1), p, top_k)

    @torch.inference_mode()
    def masked_residuals(self, mask=None, ablation: str = "zero") -> list[torch.Tensor]:
        """resid_pre of every layer and the final resid_post under `mask`, each (1, T, C),
        leaving the cache untouched; layers before the first one that differs from the cached
        run are reused."""
        mask = self._check(mask, ablation)
        cached = self.residuals()
        start = self._start_layer(mask, ablation, True)
        if start >= self.config.n_layer:
            return cached
        return self._rerun(mask, ablation, start)

    def _rerun(self, mask: np.ndarray, ablation: str, start: int) -> list[torch.Tensor]:
        """The residual streams of a run under `mask` from the cached resid_pre of `start` on."""
        L = self.config.n_layer
        names = [f"blocks.{layer}.hook_resid_pre" for layer in range(start + 1, L)]
        with (self._scratch_attention(), hooks(self.model, head_mask_hooks(mask, ablation, start)),
              caching(self.model, names) as kept):
            final = self.model.run_blocks(self._resid[start], start)
        return [*self._resid[: start + 1], *(kept[n] for n in names), final]

    def residuals(self) -> list[torch.Tensor]:
        """resid_pre of every layer, then the final resid_post, for the cached run (1, T, C)."""
        if self._resid is None:
            raise ModelError("no run yet; call run() first")
        return list(self._resid)


def _size(n: int) -> str:
    """Bytes in the unit that reads best: a small budget is not "0 MiB"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _store(dest: np.ndarray, activation: torch.Tensor) -> None:
    """Batch row 0 straight into the trace's array, converted in one pass with no temporary."""
    torch.from_numpy(dest).copy_(activation[0])


def _summarize_mlp(layer: int, arrays: dict[str, np.ndarray], post: torch.Tensor) -> None:
    """Each neuron's max over the tokens, the token where it is reached, and its mean."""
    mx, arg = column_max(post[0])  # (n_mlp,) each
    torch.from_numpy(arrays["mlp_max"][layer]).copy_(mx)
    torch.from_numpy(arrays["mlp_argmax"][layer]).copy_(arg)
    torch.from_numpy(arrays["mlp_mean"][layer]).copy_(post[0].mean(dim=0))


COLUMN_BLOCK = 256  # rows transposed at once by column_max


def column_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.max(dim=0)` of a (T, n) tensor, (n,) values and (n,) first indices, by blocks of rows.

    A max with indices over the outer dimension strides through memory: 20-40 ms for
    (1024, 3072) on a CPU core. A block of rows transposed (small enough to stay in cache) is
    reduced along contiguous rows instead, several times faster. NaN wins, as in `max`.
    """
    T, n = x.shape
    best = x.new_full((n,), float("-inf"))
    where = torch.zeros(n, dtype=torch.long, device=x.device)
    for a in range(0, T, COLUMN_BLOCK):
        m, i = x[a:a + COLUMN_BLOCK].T.contiguous().max(dim=1)  # (n,) each, over the block's rows
        better = (m > best) | (m.isnan() & ~best.isnan())  # strict: the first maximum is kept
        best = torch.where(better, m, best)
        where = torch.where(better, i + a, where)
    return best, where


def _store_norm(dest: np.ndarray, resid: torch.Tensor) -> None:
    torch.from_numpy(dest).copy_(torch.linalg.vector_norm(resid[0].float(), dim=-1))


def _store_head_norms(gram: torch.Tensor, dest: np.ndarray, z: torch.Tensor) -> None:
    """The L2 norm of each head's write to the residual: ||z_h W_h||^2 = z_h G_h z_h^T, T*nh*hs^2
    work instead of T*nh*hs*C and no (nh, T, C) temporary. gram (nh, hs, hs), dest (nh, T)."""
    zt = z[0].to(gram.dtype)  # (T, nh, hs)
    sq = (torch.einsum("tni,nij->tnj", zt, gram) * zt).sum(-1)  # (T, nh)
    torch.from_numpy(dest).copy_(sq.clamp_min_(0).sqrt_().T)


def _next_token(logits: torch.Tensor, logprobs: torch.Tensor, position: int, top_k: int) -> NextToken:
    k = max(1, min(int(top_k), logits.shape[-1]))
    top = torch.topk(logits, k)
    probs = logprobs.exp()
    return NextToken(
        position=position,
        probs=probs.cpu().numpy().astype(np.float32),
        top_ids=top.indices.cpu().numpy().astype(np.int64),
        top_probs=probs[top.indices].cpu().numpy().astype(np.float32),
        top_logits=top.values.cpu().numpy().astype(np.float32),
    )
