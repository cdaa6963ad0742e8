"""The session's prediction-only paths: the next-token distribution under a head mask (or many
masks at once) and the residual streams of a masked run, each rerunning only the layers from
the first one the mask changes. No capture: nothing here writes a trace.

A mixin of `Session` (model/capture/session.py), which owns the cache these read: `_resid`, every
layer's resid_pre and the final resid_post of the cached run, with `_cached_intervention`.
"""

from __future__ import annotations

import numpy as np
import torch

from transformer_viewer.model.capture.interventions import Intervention, batched_head_mask_hooks
from transformer_viewer.model.capture.layer_watch import attention_watch, layer_watch
from transformer_viewer.model.capture.trace import NextToken
from transformer_viewer.model.capture.unembedding import next_token, position_logits
from transformer_viewer.model.decoder.hooks import caching, hooks, reading
from transformer_viewer.model.errors import ModelError


class Predictions:
    """predict, predict_many, masked_residuals; Session supplies the model, prompt and cache."""

    @torch.inference_mode()
    def predict(self, intervention: Intervention | None = None, ablation: str | None = None,
                position: int | None = None, top_k: int = 10, update_cache: bool = True, progress=None,
                is_cancelled=None) -> NextToken:
        """The next-token distribution under `intervention` (or a bare mask and `ablation`, as
        in `run`), computing as little as possible: layers
        from the first changed one, positions up to `position` (zero ablation is causal), the
        last layer and the head at that position alone. `update_cache=False` leaves the cache
        as it was (scans). `progress` and `is_cancelled` as in `run`, for the layers rerun
        without updating the cache."""
        if update_cache:
            ids = self._require_prompt()
            change = self._intervention(intervention, ablation)
            T = ids.shape[1]
            p = self._position(position, T)
            if self._resid is None:
                self.run(None, None, p, top_k)  # a clean run fills the cache once
            start = self._start_layer(change, True)
            # Under zero ablation nothing after `position` can reach it; mean ablation averages
            # over every position. A run over every position is worth keeping as the cache.
            if start < self.config.n_layer and (change.ablation != "zero" or p == T - 1):
                new_resid = self._rerun(change, start)
                self._resid, self._cached_intervention = new_resid, change
                self._cached_trace = None  # its arrays no longer match the cache: the next run() is a full one
                return next_token(*position_logits(self.model, new_resid[-1][0, p], self.n_vocab), p, top_k)
            intervention, ablation = change, None
        return self.predict_many([intervention], ablation, position, top_k, progress, is_cancelled)[0]

    @torch.inference_mode()
    def predict_many(self, interventions, ablation: str | None = None, position: int | None = None,
                     top_k: int = 10, progress=None, is_cancelled=None) -> list[NextToken]:
        """`predict(intervention, update_cache=False)` for each of `interventions` (one
        ablation for all; bare masks with `ablation`, as in `run`), run as one batch (a batch of
        one is how `predict` computes whatever it does not keep): the runs share each layer's
        matrix products and one read of the head, which for short prompts is most of a
        prediction's cost. Every run starts from the earliest layer any mask changes; the
        batch's activations are len(masks) times one run's. `progress(layer, n_layer)` and
        `is_cancelled()` (which raises `Cancelled` soon after) as in `Session.run`."""
        ids = self._require_prompt()
        if len(interventions) == 0:
            return []
        changes = [self._intervention(i, ablation) for i in interventions]
        if any(c.clamps != changes[0].clamps for c in changes):
            # The clamps' hooks act on the whole batch alike: runs clamped differently go one by one.
            return [self.predict_many([c], None, position, top_k, progress, is_cancelled)[0] for c in changes]
        clamps = changes[0].clamps
        ablation = changes[0].ablation
        if any(c.ablation != ablation for c in changes):
            raise ModelError("the interventions of one batch of predictions must share one ablation")
        masks = np.stack([c.mask for c in changes])  # (B, L, nh)
        T = ids.shape[1]
        p = self._position(position, T)
        model, L = self.model, self.config.n_layer
        if self._resid is None:
            self.run(None, None, p, top_k)
        start = min(self._start_layer(c, True) for c in changes)
        B = masks.shape[0]
        if start >= L:
            final = self._resid[L][0, p].expand(B, -1)  # (B, C): every mask is the cached one
        else:
            # Under zero ablation the rows after p cannot reach it, and the last layer computes
            # row p alone; a head's mean (mean ablation) needs every row of its layer.
            zero = ablation == "zero"
            x = self._resid[start][:, : p + 1 if zero else T].expand(B, -1, -1)  # (B, T', C)
            # A clamp's hook reads its positions from the rows it sees: the last layer keeps them all.
            last_only = zero and not clamps
            named = batched_head_mask_hooks(masks, ablation, start) + self.clamp_hooks(changes[0], start)
            with (self._scratch_attention(), hooks(model, named),
                  self.inference.observing(attention_watch(range(start, L), is_cancelled)),
                  reading(model, layer_watch(start, L, progress, is_cancelled))):
                final = model.run_blocks(x, start, last_only=last_only)[:, -1 if zero else p]  # (B, C)
        logits = model.unembed(final).float()[:, :self.n_vocab]  # (B, V); padded rows never count
        logprobs = torch.log_softmax(logits, dim=-1)
        return [next_token(logits[b], logprobs[b], p, top_k) for b in range(B)]

    @torch.inference_mode()
    def masked_residuals(self, intervention: Intervention | None = None,
                         ablation: str | None = None) -> list[torch.Tensor]:
        """resid_pre of every layer and the final resid_post under `intervention` (or a bare
        mask and `ablation`, as in `run`), each (1, T, C), leaving the cache untouched; layers
        before the first one that differs from the cached run are reused."""
        change = self._intervention(intervention, ablation)
        cached = self.residuals()
        start = self._start_layer(change, True)
        if start >= self.config.n_layer:
            return cached
        return self._rerun(change, start)

    def _rerun(self, change: Intervention, start: int) -> list[torch.Tensor]:
        """The residual streams of a run under `change` from the cached resid_pre of `start` on."""
        L = self.config.n_layer
        names = [f"blocks.{layer}.hook_resid_pre" for layer in range(start + 1, L)]
        with (self._scratch_attention(), hooks(self.model, self.intervention_hooks(change, start)),
              caching(self.model, names) as kept):
            final = self.model.run_blocks(self._resid[start], start)
        return [*self._resid[: start + 1], *(kept[n] for n in names), final]
