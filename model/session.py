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
import time
from functools import partial

import numpy as np
import torch
from torch.nn.modules import module as _torch_module

from transformer_viewer.model.checkpoint import LoadedModel
from transformer_viewer.model.errors import CaptureTooLargeError, ModelError
from transformer_viewer.model.gpt import AttentionWorkspace, attention_workspace
from transformer_viewer.model.hooks import caching, hooks, reading
from transformer_viewer.model.interventions import check_intervention, first_changed_layer, head_mask_hooks
from transformer_viewer.model.linear import linear
from transformer_viewer.model.tokenizer import Tokenized, Tokenizer
from transformer_viewer.model.trace import NextToken, Trace, resid_labels

DEFAULT_MEMORY_BUDGET = 4 << 30  # bytes of captured arrays one trace may hold
VOCAB_BLOCK = 2048  # vocabulary rows the unembedding computes at once


class Session:
    """A model, a tokenizer and the current prompt, with the caches that make edits cheap.

    Not thread-safe: the viewer keeps one on its worker thread.
    """

    def __init__(self, loaded: LoadedModel, tokenizer: Tokenizer | None = None,
                 pattern_dtype=np.float16, memory_budget: int = DEFAULT_MEMORY_BUDGET):
        self.loaded = loaded
        self.model = loaded.model.eval()
        self.config = loaded.config
        self.tokenizer = tokenizer or Tokenizer()
        self.pattern_dtype = np.dtype(pattern_dtype)
        self.memory_budget = memory_budget
        self.n_vocab = min(self.config.vocab_size, self.tokenizer.n_vocab)  # padded rows are ignored
        self.tokens: Tokenized | None = None
        self.dropped = 0
        self._ids: torch.Tensor | None = None  # (1, T)
        self._grams: dict[int, tuple[tuple, torch.Tensor]] = {}  # layer -> (weight key, per-head Gram)
        self._workspace = AttentionWorkspace()  # attention scores, reused across layers and runs
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
        c = self.config
        pattern = c.n_layer * c.n_head * T * T * self.pattern_dtype.itemsize
        mlp = c.n_layer * T * c.n_mlp * self.pattern_dtype.itemsize
        return pattern + mlp + (c.n_layer + 1) * T * c.n_embd * 4

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
    def run(self, mask=None, ablation: str = "zero", position: int | None = None, top_k: int = 10) -> Trace:
        """Full capture under `mask`, reusing cached layers before the first changed one."""
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
        with (self._scratch_attention(), hooks(self.model, head_mask_hooks(mask, ablation, start)),
              reading(self.model, self._readers(arrays, start)), caching(self.model, resid_names) as kept):
            x = self.model.embed(ids) if start == 0 else self._resid[start]
            final = self.model.run_blocks(x, start)
        new_resid = list(self._resid) if start > 0 and self._resid else [None] * (L + 1)
        for layer in range(start, L):
            new_resid[layer] = kept[f"blocks.{layer}.hook_resid_pre"]
        new_resid[L] = final
        token_lp, logits_p, logprobs_p = self._token_logprobs(final[0], ids[0], p)
        nxt = _next_token(logits_p, logprobs_p, p, top_k)
        elapsed = (time.perf_counter() - t0) * 1000.0
        self._resid, self._cached_mask, self._cached_ablation = new_resid, mask.copy(), ablation
        tok = self.tokens
        attention, mlp_post, head_norms, norms = arrays
        trace = Trace(
            token_ids=np.asarray(tok.ids, dtype=np.int64), labels=tok.labels, spans=tok.spans, text=tok.text,
            dropped_tokens=self.dropped, attention=attention, resid_norms=norms, resid_labels=resid_labels(L),
            mlp_post=mlp_post, head_norms=head_norms, token_logprobs=token_lp, next=nxt, mask=mask.copy(),
            ablation=ablation, forward_ms=elapsed, first_layer_run=start,
        )
        self._cached_trace = trace
        return trace

    def _check_budget(self, T: int) -> None:
        if self.estimate_bytes(T) <= self.memory_budget:
            return
        fits = self.max_tokens_within_budget()
        advice = (f"shorten the prompt to {fits} tokens or fewer" if fits else
                  "not even one token fits; raise the memory budget")
        raise CaptureTooLargeError(f"capturing {T} tokens needs about {_size(self.estimate_bytes(T))}, over the "
                                   f"{_size(self.memory_budget)} budget; {advice}")

    def _trace_arrays(self, T: int, start: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(attention, mlp_post, head_norms, resid_norms) for a new trace, holding the cached
        trace's values for the layers before `start` (the rest are written by the run)."""
        c = self.config
        L, nh = c.n_layer, c.n_head
        attention = np.empty((L, nh, T, T), dtype=self.pattern_dtype)
        mlp_post = np.empty((L, T, c.n_mlp), dtype=self.pattern_dtype)
        head_norms = np.empty((L, nh, T), dtype=np.float32)
        norms = np.empty((2 * L + 2, T), dtype=np.float32)
        prev = self._cached_trace
        if start > 0 and prev is not None:
            # Copies, never shared: the previous trace may still be on screen.
            rows = 2 * L + 2 if start >= L else 1 + 2 * start
            attention[:start] = prev.attention[:start]
            mlp_post[:start] = prev.mlp_post[:start]
            head_norms[:start] = prev.head_norms[:start]
            norms[:rows] = prev.resid_norms[:rows]
        return attention, mlp_post, head_norms, norms

    def _readers(self, arrays, start: int) -> list[tuple[str, object]]:
        """(hook point, reader) pairs that write layers start.. of a run into the trace's arrays."""
        attention, mlp_post, head_norms, norms = arrays
        L = self.config.n_layer
        readers = [("hook_embed", partial(_store_norm, norms[0]))] if start == 0 else []
        for layer in range(start, L):
            b = f"blocks.{layer}"
            readers += [
                (f"{b}.hook_resid_pre", partial(_store_norm, norms[1 + 2 * layer])),
                (f"{b}.hook_resid_mid", partial(_store_norm, norms[2 + 2 * layer])),
                (f"{b}.attn.hook_pattern", partial(_store, attention[layer])),
                (f"{b}.attn.hook_z", partial(_store_head_norms, self._head_gram(layer), head_norms[layer])),
                (f"{b}.mlp.hook_post", partial(_store, mlp_post[layer])),
            ]
        readers.append((f"blocks.{L - 1}.hook_resid_post", partial(_store_norm, norms[2 * L + 1])))
        return readers

    def _scratch_attention(self):
        """Attention in the session's reusable workspace, unless a hook from outside the session
        could keep a pattern (then each layer gets its own tensor, as in a plain forward)."""
        foreign = _torch_module._global_forward_hooks or _torch_module._global_forward_pre_hooks or any(
            b.attn.hook_pattern._forward_hooks or b.attn.hook_pattern._forward_pre_hooks for b in self.model.blocks)
        return contextlib.nullcontext() if foreign else attention_workspace(self.model, self._workspace)

    def _token_logprobs(self, final: torch.Tensor, ids: torch.Tensor, p: int):
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
