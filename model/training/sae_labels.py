"""Labels for an SAE's features from their top-activating tokens, computed, never written by hand.

Over windows of text, each feature's `top` highest activations are kept (with the token each
fired on); a feature's label is its most frequent token strings among them (up to
`MAX_STRINGS`, most frequent first, joined by " / "). The features labelled are those whose top
activations agree most on one token string, one feature per label: the ones a token-level label
describes best.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.training.sae_activations import HookSite, activations

MAX_STRINGS = 3  # token strings in one label
WINDOWS_PER_FORWARD = 32


@dataclass(frozen=True)
class TopActivations:
    values: np.ndarray  # (top, d_sae) float32, highest first; 0 where a feature fired fewer times
    token_ids: np.ndarray  # (top, d_sae) int64, the token each activation was at (-1: none)


@torch.no_grad()
def top_activations(model: GPT, site: HookSite, encode: Callable[[torch.Tensor], torch.Tensor], d_sae: int,
                    windows: np.ndarray, prefix: tuple[int, ...], top: int) -> TopActivations:
    """Each feature's `top` highest activations over `windows` (n, body) of token ids, one forward
    of WINDOWS_PER_FORWARD windows at a time: memory is (top + chunk) x d_sae, not tokens x d_sae.
    The model runs on its device; `encode` is given the activations on the CPU, where the SAE trains."""
    device = next(model.parameters()).device
    best = torch.zeros(top, d_sae)
    best_ids = torch.full((top, d_sae), -1, dtype=torch.long)
    for a in range(0, len(windows), WINDOWS_PER_FORWARD):
        body = torch.from_numpy(windows[a : a + WINDOWS_PER_FORWARD].astype(np.int64))  # (B, body)
        ids = torch.cat([torch.tensor(prefix, dtype=torch.long).expand(len(body), -1), body], dim=1) if prefix else body
        f = encode(activations(model, site, ids.to(device), len(prefix)).cpu()).float()  # (B * body, d_sae)
        values = torch.cat([best, f])  # (top + B * body, d_sae)
        token_of = torch.cat([best_ids, body.reshape(-1, 1).expand(-1, d_sae)])
        keep = values.topk(top, dim=0)  # ties resolved by torch's order, the same on every run
        best, best_ids = keep.values, token_of.gather(0, keep.indices)
    best_ids = torch.where(best > 0, best_ids, -1)
    return TopActivations(best.numpy(), best_ids.numpy())


def feature_labels(tops: TopActivations, token_text: Callable[[int], str], count: int) -> list[tuple[int, str]]:
    """(feature id, label) for the `count` features whose top activations agree most on one token
    string (ties: the larger sum of top activations, then the lower id), one feature per label,
    sorted by id. A feature needs all its `top` activations positive to be labelled."""
    top, d_sae = tops.values.shape
    scored = []
    for feature in range(d_sae):
        ids = tops.token_ids[:, feature]
        if (ids < 0).any():
            continue
        strings = Counter(token_text(int(i)) for i in ids)
        ranked = sorted(strings.items(), key=lambda kv: (-kv[1], kv[0]))
        label = " / ".join(s for s, _ in ranked[:MAX_STRINGS])
        share = ranked[0][1] / top
        scored.append((-share, -float(tops.values[:, feature].sum()), feature, label))
    scored.sort()
    chosen, used = [], set()
    for _, _, feature, label in scored:
        if label not in used:  # one feature per label: a handful of different ones, not six newlines
            chosen.append((feature, label))
            used.add(label)
        if len(chosen) == count:
            break
    return sorted(chosen)


def token_string(tokenizer) -> Callable[[int], str]:
    """A token as a label shows it: its text without surrounding spaces, or its visible form
    (a newline as the window shows it) when it is only whitespace."""
    def text(i: int) -> str:
        s = tokenizer.token_bytes(i).decode("utf-8", errors="replace").strip()
        return s or tokenizer.label(i)
    return text


def labels_csv(labels: list[tuple[int, str]]) -> bytes:
    """The `id,label` CSV a labels file holds, with its header."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["id", "label"])
    writer.writerows(labels)
    return buf.getvalue().encode("utf-8")
