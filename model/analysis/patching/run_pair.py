"""What attribution patching and path patching start from: the clean and the corrupted prompt as
one pair of token ids, the run that is patched and the run its values come from, and a plain
forward of either that keeps the residual stream and the activations asked for.

Denoising patches the corrupted run with the clean run's values; noising, the clean run with the
corrupted run's. Both runs are made under the same head mask and feature clamps (the Intervention
applies to both). Clamps need the SAEs a session holds: `session_hooks` gives a session's hooks
of an Intervention; without a session (`mask_hooks`) an Intervention with clamps is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from transformer_viewer.model.analysis.patching.grid import DIRECTIONS
from transformer_viewer.model.analysis.patching.metric import PatchMetric
from transformer_viewer.model.capture.interventions import Intervention
from transformer_viewer.model.capture.patched_runs import RunActivations
from transformer_viewer.model.decoder.hooks import caching, hooks
from transformer_viewer.model.errors import ModelError

# The hooks applying an Intervention to a run from layer `start_layer` whose hooks see the last
# rows of `total` positions (None: every row from position 0): (start_layer, total) -> [(name, hook)].
RunHooks = Callable[[int, "int | None"], list]


def mask_hooks(change: Intervention) -> RunHooks:
    """The hooks of `change`'s head mask, for runs without a session: clamps need the SAEs a
    session holds, so `change.hooks` refuses an Intervention with clamps, in one line."""
    change.hooks()  # refuses clamps (and patches) before any run

    def named(start_layer: int, _total: int | None = None) -> list:
        return change.hooks(start_layer)
    return named


def session_hooks(session, change: Intervention) -> RunHooks:
    """The hooks of `change`'s head mask and then its feature clamps, from `session`, which holds
    the clamps' SAEs."""
    session.clamp_hooks(change)  # checked once before any run

    def named(start_layer: int, total: int | None = None) -> list:
        return session.intervention_hooks(change, start_layer, total)
    return named


@dataclass(frozen=True)
class RunPair:
    """The two prompts' ids, (1, T) each, cut to the positions the metric can see, and which
    one is patched. Made by `run_pair`, which checks the lengths, the direction and the
    metric's position once."""

    clean: torch.Tensor  # (1, T') long
    corrupted: torch.Tensor  # (1, T') long
    direction: str  # one of DIRECTIONS
    position: int  # the metric's position, < T'
    n_tokens: int  # T, the prompts' full length (columns of a by-position grid)
    causal: bool  # True: no position after the metric's can reach it (no head is mean-ablated)

    @property
    def patched(self) -> torch.Tensor:
        """The ids of the run that is patched (corrupted when denoising)."""
        return self.corrupted if self.direction == "denoise" else self.clean

    @property
    def source(self) -> torch.Tensor:
        """The ids of the run the patched values come from (clean when denoising)."""
        return self.clean if self.direction == "denoise" else self.corrupted


def run_pair(clean_ids, corrupted_ids, metric: PatchMetric, direction: str, change: Intervention,
             what: str) -> RunPair:
    """Check the pair for `what` and cut it to the positions the metric reads.

    Positions after the metric's cannot reach it in a causal model, so neither run computes
    them; except under mean ablation of some head, whose mean is over every position."""
    if direction not in DIRECTIONS:
        raise ModelError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    clean = torch.as_tensor(clean_ids, dtype=torch.long).reshape(1, -1)  # (1, T)
    corrupted = torch.as_tensor(corrupted_ids, dtype=torch.long).reshape(1, -1)
    T, Tc = clean.shape[1], corrupted.shape[1]
    if T == 0 or Tc == 0:
        raise ModelError("a prompt is empty; type a clean and a corrupted prompt first")
    if T != Tc:
        raise ModelError(f"{what} needs the clean and corrupted prompts to have the same number of tokens "
                         f"(they have {T} and {Tc}); edit one so they line up token for token")
    p = metric.resolve_position(T)
    causal = not (change.ablation == "mean" and change.mask.any())
    keep = p + 1 if causal else T
    return RunPair(clean[:, :keep], corrupted[:, :keep], direction, p, T, causal)


@torch.no_grad()
def plain_run(model, ids: torch.Tensor, run_hooks: RunHooks, names=()) -> RunActivations:
    """A forward of `ids` (1, T) under the hooks `run_hooks` gives from layer 0 (`mask_hooks`,
    `session_hooks`), keeping resid_pre of each layer and the final resid_post, (1, T, C) each,
    and the activations at hook points `names` by name, as the hooks left them: what the
    session's patch sources keep, for callers without a session."""
    L = model.config.n_layer
    resid_names = [f"blocks.{layer}.hook_resid_pre" for layer in range(L)]
    wanted = list(dict.fromkeys([*resid_names, *names]))
    with hooks(model, run_hooks(0, None)), caching(model, wanted) as kept:
        final = model.run_blocks(model.embed(ids.to(_device(model))))
    return RunActivations(ids, [kept[n] for n in resid_names] + [final], {n: kept[n] for n in names})


def _device(model) -> torch.device:
    return next(model.parameters()).device


def metric_logits(model, final: torch.Tensor, position: int, n_vocab: int) -> torch.Tensor:
    """The logits at `position` of final residual streams (B, T, C) -> (B, V), padded rows cut."""
    return model.unembed(final[:, position]).float()[:, :n_vocab]  # (B, V)


def clean_logprobs(model, clean_final: torch.Tensor, metric: PatchMetric, position: int,
                   n_vocab: int) -> torch.Tensor | None:
    """The clean run's log-softmax at the position, (V,): what the kl metric compares with."""
    if metric.kind != "kl":
        return None
    with torch.no_grad():
        return torch.log_softmax(metric_logits(model, clean_final, position, n_vocab)[0], dim=-1)
