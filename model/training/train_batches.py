"""Training windows that repeat a passage: in-context copying for an induction head to learn.

Natural text repeats itself (refrains, formulas, speakers' names), but in a 128-token window of
a few million tokens it rarely repeats a whole passage, so copying from earlier in the context
pays the loss little and an induction head has no reason to form. `repeat_passages` rewrites a
seeded fraction of the training windows so that one passage of the window appears again later
in the same window: the tokens after the copy's start are predictable only by finding the
earlier occurrence and reading what came next. Validation windows are never rewritten, so the
validation loss stays a loss on natural text.
"""

from __future__ import annotations

import torch

MIN_PASSAGE = 4  # tokens: shorter copies are common in natural text already


def repeat_passages(x: torch.Tensor, y: torch.Tensor, fraction: float,
                    gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) of (B, T) next-token windows with a seeded `fraction` of the rows rewritten: a
    passage of L tokens (MIN_PASSAGE <= L <= (T + 1) // 2) copied from position s to a later,
    non-overlapping position d of the same window. Returns new tensors; `fraction` 0 returns
    the inputs and draws nothing from `gen`, so batches equal those of a run without repeats.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the repeat fraction must be between 0 and 1, got {fraction}")
    if fraction == 0.0:
        return x, y
    B, T = x.shape
    seq = torch.cat([x, y[:, -1:]], dim=1)  # (B, T + 1): the window, y is x shifted by one
    longest = (T + 1) // 2
    chosen = torch.rand(B, generator=gen) < fraction  # (B,)
    if longest < MIN_PASSAGE:
        return x, y  # no room for a passage and its copy
    for row in torch.nonzero(chosen).flatten().tolist():
        n = int(torch.randint(MIN_PASSAGE, longest + 1, (1,), generator=gen))
        src = int(torch.randint(0, T + 1 - 2 * n + 1, (1,), generator=gen))
        dst = int(torch.randint(src + n, T + 1 - n + 1, (1,), generator=gen))
        seq[row, dst : dst + n] = seq[row, src : src + n]
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()  # (B, T) each
