"""Head-importance scan: ablate each head in turn and measure what it does to one prediction.

For every head not already in the base mask, the model runs with base mask + that head and we
record, at one position:
  - the metric: log p(target), or with a distractor the logit difference
    logit(target) - logit(distractor), which is also the log-probability difference
    (log p(t) - log p(d)): the softmax normaliser cancels, so the two are one number;
  - its change from the baseline (base mask alone): `effect`, negative when the head helped;
  - KL(baseline || ablated) over the whole next-token distribution, in nats.

The heads of one layer run together (`Session.predict_many`): their runs resume from the
cached resid_pre of that layer as one batch, which shares each layer's matrix products and one
read of the unembedding among them (a short prompt's prediction is mostly those), as many at
once as `SCAN_BATCH_BYTES` of activations allow. The session's cache is left exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from transformer_viewer.model.capture.interventions import Intervention, requested
from transformer_viewer.model.decoder.hooks import reading
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.kernels.attention_kernels import LARGEST_BLOCK

METRICS = ("logprob", "logit_diff")
SCAN_BATCH_BYTES = 256 * 2**20  # activations of one batch of runs, about


@dataclass(frozen=True)
class ScanResult:
    position: int
    target_id: int
    distractor_id: int | None
    metric: str  # "logprob" or "logit_diff" (= log-prob difference)
    ablation: str
    base_mask: np.ndarray  # (L, nh) bool, ablated in every run including the baseline
    baseline_metric: float
    baseline_target_prob: float
    metric_values: np.ndarray  # (L, nh) float32, the metric with that head also ablated; NaN if not run
    effect: np.ndarray  # (L, nh) float32, metric_values - baseline_metric
    kl: np.ndarray  # (L, nh) float32, KL(baseline || ablated) in nats
    target_probs: np.ndarray  # (L, nh) float32, p(target) with that head ablated
    done: np.ndarray  # (L, nh) bool, heads that were measured
    cancelled: bool

    @property
    def n_done(self) -> int:
        return int(self.done.sum())

    def ranked(self, by: str = "effect") -> list[tuple[int, int]]:
        """Measured heads, most important first: by effect (largest drop of the metric first),
        by |effect|, or by KL (largest first)."""
        cells = [(int(layer), int(head)) for layer, head in zip(*np.nonzero(self.done), strict=True)]
        keys = {
            "effect": lambda c: (float(self.effect[c]), c),
            "abs": lambda c: (-abs(float(self.effect[c])), c),
            "kl": lambda c: (-float(self.kl[c]), c),
        }
        if by not in keys:
            raise ModelError(f"sort by one of {', '.join(keys)}, got {by!r}")
        return sorted(cells, key=keys[by])


class _Cancelled(Exception):
    pass


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) in nats; a token q gives probability 0 counts at float32's smallest value."""
    p = np.asarray(p, dtype=np.float64)
    q = np.maximum(np.asarray(q, dtype=np.float64), np.finfo(np.float32).smallest_subnormal)
    nz = p > 0
    return float(np.sum(p[nz] * (np.log(p[nz]) - np.log(q[nz]))))


def _metric(probs: np.ndarray, target: int, distractor: int | None) -> float:
    lp = np.log(np.maximum(np.float64(probs[target]), np.finfo(np.float32).smallest_subnormal))
    if distractor is None:
        return float(lp)
    ld = np.log(np.maximum(np.float64(probs[distractor]), np.finfo(np.float32).smallest_subnormal))
    return float(lp - ld)


def batch_size(config, T: int) -> int:
    """Runs a batch may hold at T tokens: per run and token, a layer's activations are about
    4 n_embd + 3 n_mlp floats, and one block of attention rows n_head x LARGEST_BLOCK."""
    per_run = 4 * T * (4 * config.n_embd + 3 * config.n_mlp + config.n_head * LARGEST_BLOCK)
    return max(1, min(config.n_head, SCAN_BATCH_BYTES // per_run))


def head_scan(session, target: int | None = None, distractor: int | None = None, position: int | None = None,
              intervention: Intervention | None = None, ablation: str | None = None, base_mask=None,
              progress: Callable[[int, int], None] | None = None,
              is_cancelled: Callable[[], bool] | None = None) -> ScanResult:
    """Scan every head. `target` None means the baseline's top token. Cancelling (is_cancelled()
    returning True) stops within one layer's compute and returns a partial result flagged
    `cancelled`; the session is unchanged either way. `intervention` holds in every run, the
    baseline's included, and says how each scanned head is ablated (`base_mask=` and
    `ablation=` instead: made into one by Intervention.make)."""
    change = requested(session.config, intervention, base_mask, ablation, what="base mask")
    base, ablation = change.mask, change.ablation
    L, nh = base.shape
    baseline = session.predict(change, position=position, top_k=1, update_cache=False)
    p = baseline.position
    V = baseline.probs.shape[0]
    target = int(baseline.top_ids[0]) if target is None else int(target)
    for name, tok in (("target", target), ("distractor", distractor)):
        if tok is not None and not 0 <= int(tok) < V:
            raise ModelError(f"{name} token id {tok} is outside the vocabulary of {V}")
    distractor = None if distractor is None else int(distractor)
    if distractor is not None and distractor == target:
        raise ModelError("the distractor is the target token; choose a different one")
    base_metric = _metric(baseline.probs, target, distractor)

    values = np.full((L, nh), np.nan, dtype=np.float32)
    kl = np.full((L, nh), np.nan, dtype=np.float32)
    tprobs = np.full((L, nh), np.nan, dtype=np.float32)
    done = np.zeros((L, nh), dtype=bool)
    todo = [(layer, head) for layer in range(L) for head in range(nh) if not base[layer, head]]
    size = batch_size(session.config, p + 1 if ablation == "zero" else len(session.tokens.ids))
    batches = []  # the heads of one layer, `size` at a time
    for layer in range(L):
        heads = [c for c in todo if c[0] == layer]
        batches += [heads[i:i + size] for i in range(0, len(heads), size)]
    cancelled = False
    check = is_cancelled or (lambda: False)

    def stop_if_cancelled(_resid):
        if check():
            raise _Cancelled
    # Checked as each block starts, so a cancel lands within one layer even on a big model.
    stops = [(f"blocks.{layer}.hook_resid_pre", stop_if_cancelled) for layer in range(L)]
    if progress:
        progress(0, len(todo))
    try:
        with reading(session.model, stops):
            n = 0
            for batch in batches:
                if check():
                    raise _Cancelled
                runs = [change.with_head(layer, head) for layer, head in batch]
                for (layer, head), out in zip(batch, session.predict_many(runs, position=p, top_k=1), strict=True):
                    values[layer, head] = _metric(out.probs, target, distractor)
                    kl[layer, head] = kl_divergence(baseline.probs, out.probs)
                    tprobs[layer, head] = out.probs[target]
                    done[layer, head] = True
                n += len(batch)
                if progress:
                    progress(n, len(todo))
    except _Cancelled:
        cancelled = True
    return ScanResult(
        position=p, target_id=target, distractor_id=distractor,
        metric="logprob" if distractor is None else "logit_diff", ablation=ablation, base_mask=base,
        baseline_metric=base_metric, baseline_target_prob=float(baseline.probs[target]),
        metric_values=values, effect=(values - np.float32(base_metric)).astype(np.float32), kl=kl,
        target_probs=tprobs, done=done, cancelled=cancelled,
    )
