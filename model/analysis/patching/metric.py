"""What a patching experiment measures: one number per run, read from its logits at one position.

Three kinds, as interpretability work uses them:

- ``logit-diff``: logit(A) - logit(B) (e.g. `` Mary`` vs `` John``), of the logits the model
  returns (after any final soft-cap);
- ``logprob``: log p(A);
- ``kl``: KL(clean || run), the divergence of the run's next-token distribution from the clean
  run's. It is 0 at the clean run and grows as the run departs from it, so its normalised value
  is taken with clean = 1 and corrupted = 0 like the others.

A metric is a frozen value (equal metrics hash alike), so caches of patching results key on it.
Torch loads on first use: the command line reads METRICS to check its arguments before any model
(or torch) loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformer_viewer.model.errors import ModelError

if TYPE_CHECKING:
    import torch

METRIC_HELP = {
    "logit-diff": "logit(A) - logit(B) at the position",
    "logprob": "log p(A) at the position",
    "kl": "KL divergence of the run's next-token distribution from the clean run's",
}
METRICS = tuple(METRIC_HELP)

# How close the clean and the corrupted metric may be before "share of the clean answer
# restored" stops meaning anything: below this the normalised values are shown but flagged.
MIN_NORMALISING_GAP = 1e-3


@dataclass(frozen=True)
class PatchMetric:
    """`kind` (one of METRICS) over `tokens` at `position` (None: the last position).

    tokens: (A, B) for logit-diff, (A,) for logprob, () for kl. Made by `PatchMetric.make`,
    which checks it once."""

    kind: str
    tokens: tuple[int, ...] = ()
    position: int | None = None

    @classmethod
    def make(cls, kind: str, tokens=(), position: int | None = None, n_vocab: int | None = None) -> PatchMetric:
        if kind not in METRICS:
            raise ModelError(f"metric must be one of {', '.join(METRICS)}, got {kind!r}")
        tokens = tuple(int(t) for t in tokens)
        need = {"logit-diff": 2, "logprob": 1, "kl": 0}[kind]
        if len(tokens) != need:
            what = {2: "two tokens (A B)", 1: "one token", 0: "no tokens"}[need]
            raise ModelError(f"the {kind} metric needs {what}, got {len(tokens)}")
        if n_vocab is not None:
            for t in tokens:
                if not 0 <= t < n_vocab:
                    raise ModelError(f"token id {t} is outside this model's vocabulary (0..{n_vocab - 1})")
        return cls(kind, tokens, None if position is None else int(position))

    def resolve_position(self, T: int) -> int:
        """The position read in a prompt of T tokens (negative positions count from the end)."""
        p = T - 1 if self.position is None else self.position
        if p < 0:
            p += T
        if not 0 <= p < T:
            raise ModelError(f"metric position {self.position} is outside the prompt (0..{T - 1})")
        return p

    def __call__(self, logits: torch.Tensor, clean_logprobs: torch.Tensor | None = None) -> torch.Tensor:
        """The metric of each run: logits (B, V) at the position -> (B,) float32.

        clean_logprobs (V,): the clean run's log-softmax at the position, needed by kl only.
        Differentiable, so attribution patching takes its gradient."""
        import torch  # on first use: see the module's docstring

        logits = logits.float()
        if self.kind == "logit-diff":
            a, b = self.tokens
            return logits[:, a] - logits[:, b]
        logprobs = torch.log_softmax(logits, dim=-1)  # (B, V)
        if self.kind == "logprob":
            return logprobs[:, self.tokens[0]]
        if clean_logprobs is None:
            raise ValueError("the kl metric needs the clean run's log-probabilities")
        p = clean_logprobs.float().to(logprobs.device)[None]  # (1, V)
        return (p.exp() * (p - logprobs)).sum(dim=-1)

    def describe(self, token_label=None) -> str:
        """One line for titles: "logit( Mary) - logit( John) at 14"; token_label(id) names tokens."""
        name = token_label or (lambda t: f"#{t}")
        where = "the last position" if self.position is None else f"position {self.position}"
        if self.kind == "logit-diff":
            return f"logit({name(self.tokens[0])}) - logit({name(self.tokens[1])}) at {where}"
        if self.kind == "logprob":
            return f"log p({name(self.tokens[0])}) at {where}"
        return f"KL(clean || run) at {where}"
