"""What an activation-patching experiment in the window is: the corrupted prompt beside the state's
(clean) prompt, the metric, the direction, what is patched, and how the results are shown.

`PatchSetup` is a frozen value held by `ViewerState.patching`; the views change it through
`ViewerState.set_patching(...)`, which checks it here. Nothing here imports torch: the window
builds and checks metrics on the GUI thread (model/analysis/patching/metric.py and grid.py are
torch-free at import).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

import numpy as np

from transformer_viewer.model.analysis.patching.grid import DIRECTIONS, WHATS
from transformer_viewer.model.analysis.patching.metric import METRICS, PatchMetric
from transformer_viewer.model.errors import ModelError

BY_POSITION = ("embed", "resid", "attn", "mlp", "heads-by-pos")  # kinds that patch one position at a time
TOKENS_NEEDED = {"logit-diff": 2, "logprob": 1, "kl": 0}
INPUTS = ("q", "k", "v")  # a path patch's receiver input


@dataclass(frozen=True)
class PatchSetup:
    comparing: bool = False  # the corrupted prompt's box is shown ("Compare with a corrupted prompt")
    corrupted: str = ""  # the corrupted prompt's text
    metric: str = "logit-diff"  # one of METRICS
    tokens: tuple[int, ...] = ()  # (A, B) for logit-diff, (A,) for logprob; fewer: not chosen yet
    position: int | None = None  # where the metric is read; None: the last position
    direction: str = "denoise"  # one of DIRECTIONS: clean into corrupted (denoise) or back (noise)
    what: str = "heads"  # one of WHATS
    layer: int = 0  # the layer heads-by-pos shows
    receiver: tuple[int, int] = (0, 0)  # path patching's receiver head (layer, head)
    input: str = "v"  # path patching's receiver input, one of INPUTS
    normalised: bool = True  # show corrupted = 0, clean = 1 rather than the raw metric
    pairs: tuple[tuple[str, str], ...] = ()  # a pairs file's (clean, corrupted) prompts, averaged over
    pairs_name: str = ""  # the file they came from, for titles

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ModelError(f"metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if self.direction not in DIRECTIONS:
            raise ModelError(f"direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}")
        if self.what not in WHATS:
            raise ModelError(f"what is patched must be one of {', '.join(WHATS)}, got {self.what!r}")
        if self.input not in INPUTS:
            raise ModelError(f"a receiver's input is one of q, k, v, got {self.input!r}")

    def changed(self, **changes) -> PatchSetup:
        return replace(self, **changes)

    @property
    def active(self) -> bool:
        """A comparison is asked for and has a corrupted prompt (or a pairs file) to compare with."""
        return self.comparing and (bool(self.corrupted.strip()) or bool(self.pairs))

    def metric_value(self, n_vocab: int | None = None) -> PatchMetric:
        """The PatchMetric this setup measures (ModelError: tokens missing or outside the vocabulary)."""
        need = TOKENS_NEEDED[self.metric]
        if len(self.tokens) < need:
            which = "tokens A and B" if need == 2 else "token A"
            raise ModelError(f"choose {which} for the {self.metric} metric (type them, or right-click a "
                             "token in the next-token panel)")
        return PatchMetric.make(self.metric, self.tokens[:need], self.position, n_vocab=n_vocab)

    def mask_line(self, masked_heads: int, clamps: int = 0) -> str:
        """How the current head mask and feature clamps apply to the two runs, in one line."""
        clamped = f"{clamps} feature clamp{'s' if clamps != 1 else ''}"
        if not masked_heads:
            if clamps:
                return f"no heads masked; {clamped} apply to both runs and every patched run"
            return "no heads masked: both runs use the whole model"
        heads = f"the head mask ({masked_heads} head{'s' if masked_heads != 1 else ''})"
        if clamps:
            return f"{heads} and {clamped} apply to both runs and every patched run"
        return f"{heads} applies to both runs"


def differing(clean_ids, corrupted_ids) -> tuple[np.ndarray, np.ndarray]:
    """Which tokens differ: (len(clean),) and (len(corrupted),) bool. Prompts of one length are
    compared position by position (what patching by position pairs up); others by the longest
    matching blocks, so an inserted word marks only itself."""
    a, b = list(clean_ids), list(corrupted_ids)
    da, db = np.zeros(len(a), dtype=bool), np.zeros(len(b), dtype=bool)
    if len(a) == len(b):
        d = np.asarray(a, dtype=np.int64) != np.asarray(b, dtype=np.int64)
        return d, d.copy()
    for tag, i0, i1, j0, j1 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            da[i0:i1] = True
            db[j0:j1] = True
    return da, db


def length_line(n_clean: int, n_corrupted: int) -> str:
    """One line on whether the prompts pair up position by position ("" when they do)."""
    if n_clean == n_corrupted:
        return ""
    return (f"the clean prompt is {n_clean} tokens and the corrupted one {n_corrupted}: patching by position "
            f"(embed, resid, attn, mlp, heads by position) needs equal lengths; heads over all positions "
            f"and patterns still work")
