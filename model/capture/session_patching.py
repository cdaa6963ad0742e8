"""The session's second prompt, for activation patching: the corrupted prompt beside the clean
one (the session's own), both runs' patchable activations cached once per head mask and feature
clamps (both apply to the two prompts alike), and runs of an Intervention with patches read
from them.

A mixin of `Session` (model/capture/session.py): setting either prompt drops what was cached
for the pair; setting the clean prompt clears the corrupted one too (a pair is set together).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.capture.feature_clamps import clamp_hooks
from transformer_viewer.model.capture.interventions import Intervention
from transformer_viewer.model.capture.memory_budget import max_tokens, patch_sources_bytes, size_text
from transformer_viewer.model.capture.patched_runs import (
    SOURCE_SITES,
    Alignment,
    ClampHooks,
    PatchedBatch,
    RunActivations,
    no_clamps,
    patched_final,
    record_run,
    record_sites,
)
from transformer_viewer.model.capture.unembedding import next_token
from transformer_viewer.model.errors import CaptureTooLargeError, ModelError
from transformer_viewer.model.tokenizers.tokenizer import Tokenized


@dataclass(frozen=True)
class PromptPair:
    """How the clean and the corrupted prompt line up: their lengths and, where equal, the
    positions whose tokens differ."""

    clean_tokens: int
    corrupted_tokens: int
    differing: tuple[int, ...]  # positions whose token ids differ (equal lengths only; else ())

    @property
    def same_length(self) -> bool:
        return self.clean_tokens == self.corrupted_tokens

    def describe(self) -> str:
        """One line for people."""
        if not self.same_length:
            return (f"the prompts differ in length ({self.clean_tokens} and {self.corrupted_tokens} tokens): "
                    "patching by position needs equal lengths; heads and patterns can still be patched")
        if not self.differing:
            return f"the prompts are the same {self.clean_tokens} tokens"
        where = ", ".join(map(str, self.differing[:8])) + (", ..." if len(self.differing) > 8 else "")
        return (f"{self.clean_tokens} tokens each; {len(self.differing)} position"
                f"{'s' if len(self.differing) != 1 else ''} differ: {where}")


@dataclass
class PatchSources:
    """Both prompts' runs under one head mask and its feature clamps, every patchable activation kept."""

    mask_intervention: Intervention  # the head mask and clamps both runs share (no patches)
    runs: dict  # "clean" / "corrupted" -> RunActivations


class PatchedPredictions:
    """set_corrupted, prompt_pair, patch_sources, predict_patched; Session supplies the model,
    the clean prompt and the budget."""

    corrupted: Tokenized | None = None
    corrupted_dropped: int = 0  # tokens set_corrupted dropped from the start of a prompt past the context
    _corrupted_ids: torch.Tensor | None = None
    _patch_sources: PatchSources | None = None

    # -- the corrupted prompt -------------------------------------------------------------
    def set_corrupted(self, text: str) -> Tokenized:
        """Tokenize the corrupted prompt (a prompt longer than block_size keeps its last
        block_size tokens, as the clean one)."""
        tok, dropped = self.tokenizer.tokenize_last(text, self.config.block_size)
        self.set_corrupted_tokens(tok)
        self.corrupted_dropped = dropped
        return tok

    def set_corrupted_tokens(self, tok: Tokenized) -> None:
        tok = self._checked_tokens(tok)  # as the clean prompt's
        self.corrupted, self.corrupted_dropped = tok, 0
        self._corrupted_ids = torch.tensor([tok.ids], dtype=torch.long, device=self.device)  # (1, T)
        self._patch_sources = None

    def clear_corrupted(self) -> None:
        self.corrupted, self.corrupted_dropped, self._corrupted_ids, self._patch_sources = None, 0, None, None

    def prompt_pair(self) -> PromptPair:
        """Whether the clean and the corrupted prompt tokenize to the same length, and where they differ."""
        self._require_pair()
        a, b = np.asarray(self.tokens.ids), np.asarray(self.corrupted.ids)
        differing = tuple(int(i) for i in np.nonzero(a != b)[0]) if len(a) == len(b) else ()
        return PromptPair(len(a), len(b), differing)

    def _require_pair(self) -> tuple[torch.Tensor, torch.Tensor]:
        clean = self._require_prompt()
        if self._corrupted_ids is None or self._corrupted_ids.shape[1] == 0:
            raise ModelError("no corrupted prompt; type one beside the clean prompt (or pass --corrupted)")
        return clean, self._corrupted_ids

    # -- the runs patches read from -------------------------------------------------------
    def patch_sources_bytes(self, sites=SOURCE_SITES) -> int:
        """Bytes both runs' cached activations take with `sites` kept."""
        clean, corrupted = self._require_pair()
        return sum(patch_sources_bytes(self.config, ids.shape[1], sites) for ids in (clean, corrupted))

    @torch.inference_mode()
    def patch_sources(self, intervention: Intervention | None = None, patterns: bool = False,
                      sites=None) -> PatchSources:
        """Both prompts' runs under `intervention`'s head mask and feature clamps (its patches
        aside; both apply to the two prompts alike, a clamp at a position past a prompt's end
        only where it reaches), their residual streams and the activations of `sites`
        (PATCH_SITES; None: every site but the pattern) kept: computed once per (prompts, head
        mask and clamps), dropped when a prompt changes; a site asked for later costs one more
        forward of each prompt. `patterns`: the "pattern" site too (L x nh x T^2 floats a run).
        The whole is bounded by the memory budget."""
        clean, corrupted = self._require_pair()
        change = self._intervention(intervention, None).with_patches(())
        clamps = self.clamp_hooks(change)  # checks the clamps against the SAEs held
        for ids in (clean, corrupted):  # each run is a capture's forward: bounded alike
            self._check_budget(ids.shape[1])
        sites = set(SOURCE_SITES if sites is None else sites) | ({"pattern"} if patterns else set())
        cached = self._patch_sources
        if cached is not None and cached.mask_intervention != change:
            cached = self._patch_sources = None  # another head mask: its runs are not these
        kept = set().union(*(run.sites for run in cached.runs.values())) if cached is not None else set()
        self._check_patch_budget(max(clean.shape[1], corrupted.shape[1]), sites | kept)
        # Kept patterns need a tensor each: the session's scratch attention reuses one buffer.
        with self._scratch_attention() if "pattern" not in sites else contextlib.nullcontext():
            if cached is None:
                runs = {name: record_run(self.model, ids, change.mask, change.ablation, sites, clamps)
                        for name, ids in (("clean", clean), ("corrupted", corrupted))}
                cached = self._patch_sources = PatchSources(change, runs)
            else:
                for run in cached.runs.values():
                    record_sites(self.model, run, change.mask, change.ablation, sites, clamps)
        return cached

    def _check_patch_budget(self, T: int, sites) -> None:
        """Refuse runs whose kept activations, beside a capture of the clean prompt (the two
        prompts share one budget), would pass the memory budget, saying what length fits."""
        def need(t: int) -> int:
            return 2 * patch_sources_bytes(self.config, t, sites) + self.estimate_bytes(t)

        if need(T) <= self.memory_budget:
            return
        fits = max_tokens(need, self.memory_budget, self.config.block_size)
        raise CaptureTooLargeError(f"patching prompts of {T} tokens keeps about {size_text(need(T))} of activations, "
                                   f"over the {size_text(self.memory_budget)} memory budget; shorten the prompts to "
                                   f"{fits} tokens or fewer" + (", or patch fewer kinds at once" if len(sites) > 2
                                                                else ""))

    def patch_alignment(self, target: RunActivations, source: RunActivations, position: int | None,
                        skip_rows: bool) -> Alignment:
        """How a patched run of `target` meets `source`: lined up at the metric's `position`
        (None: the last; negative: from the end; a position from the start needs equal lengths),
        and run up to it where rows after it cannot matter (`skip_rows`)."""
        if target.T != source.T and position is not None and position >= 0:
            raise ModelError("the prompts differ in length, so a position counted from the start means different "
                             "tokens in each; give the metric's position from the end (-1 is the last)")
        mt, ms = self._position(position, target.T), self._position(position, source.T)
        if not skip_rows:
            return Alignment(target.T, ms - mt, mt)
        same = 0
        if target.T == source.T:
            differ = (target.ids[0] != source.ids[0]).nonzero()
            same = int(differ[0, 0]) if len(differ) else target.T
        return Alignment(mt + 1, ms - mt, same_before=same)

    def patch_clamp_hooks(self, change: Intervention) -> ClampHooks:
        """`change`'s clamp hooks for a patched run (`PatchedBatch.clamp_hooks`): from a start
        layer, over the last rows of a prompt's positions."""
        if not change.clamps:
            return no_clamps
        self.clamp_hooks(change)  # checked once, and each SAE on the model's device

        def clamped(start_layer: int, total: int) -> list:
            return clamp_hooks(change.clamps, self.saes, start_layer, total)
        return clamped

    def skip_rows(self, change: Intervention) -> bool:
        """Whether patched runs may skip rows before a patch and after the metric: not when a
        mean-ablated head averages over every position."""
        return not (change.ablation == "mean" and change.mask.any())

    @torch.inference_mode()
    def predict_patched(self, intervention: Intervention, position: int | None = None, top_k: int = 10):
        """The next-token distribution at `position` of the run `intervention`'s patches are
        written into (the prompt that is not their source), under its head mask and feature
        clamps, each patch's value read from the source prompt's run under the same mask and
        clamps (a patch at a clamp's hook point writes the source's clamped value)."""
        change = self._intervention(intervention, None)
        if not change.patches:
            raise ModelError("this intervention has no patches; predict() runs it")
        sources = self.patch_sources(change, sites={p.site for p in change.patches})
        source_name = change.patches[0].source
        target = sources.runs[change.patches[0].target]
        source = sources.runs[source_name]
        skip = self.skip_rows(change)
        align = self.patch_alignment(target, source, position, skip)
        check_positions(change.patches, target.T, source.T)
        batch = PatchedBatch(change.mask, change.ablation, target, source, align, skip, self.patch_clamp_hooks(change))
        with self._scratch_attention():
            final = patched_final(self.model, batch, [change.patches])  # (1, C)
        logits = self.model.unembed(final).float()[0, : self.n_vocab]  # (V,)
        return next_token(logits, torch.log_softmax(logits, dim=-1), align.metric_row, top_k)


def check_positions(patches, target_T: int, source_T: int) -> None:
    """A patch at given positions needs prompts of one length, and positions inside them."""
    for p in patches:
        if p.positions is None:
            continue
        if target_T != source_T:
            raise ModelError(f"the prompts differ in length ({target_T} and {source_T} tokens); patching by "
                             "position needs equal lengths: patch a head over all positions or its pattern instead")
        if p.positions[-1] >= target_T:
            raise ModelError(f"position {p.positions[-1]} is outside the prompt's {target_T} tokens")
