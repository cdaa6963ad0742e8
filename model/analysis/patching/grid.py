"""What a patching experiment returns: `PatchGrid`, one metric value per patched cell, with the
clean and corrupted runs' values that normalise it. It crosses to the viewer and the command
line as numpy arrays in a frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transformer_viewer.model.analysis.patching.metric import MIN_NORMALISING_GAP

# What can be patched, by name (the command line's --what and the views' ids use these).
WHAT_HELP = {
    "embed": "the embedding (token and learned positions), by position",
    "resid": "the residual stream entering each layer (and the final one), by layer x position",
    "attn": "each layer's attention output, by layer x position",
    "mlp": "each layer's MLP output, by layer x position",
    "heads": "each head's output (hook_z) over all positions, by layer x head",
    "heads-by-pos": "each head's output in one layer, by head x position",
    "pattern": "each head's attention pattern only (clean pattern, corrupted values), by layer x head",
    "q": "each head's queries, by layer x head",
    "k": "each key/value head's keys, by layer x key/value head",
    "v": "each key/value head's values, by layer x key/value head",
    "path": "each sender head's output into one receiver head's input only, by layer x head",
}
WHATS = tuple(WHAT_HELP)
DIRECTIONS = ("denoise", "noise")  # denoise: clean into corrupted (the default); noise: corrupted into clean


@dataclass(frozen=True)
class PatchGrid:
    """`raw[r, c]`: the metric of the run patched at cell (r, c); NaN where a cell was not computed
    (an exact grid filled on demand). `clean` and `corrupted` are the unpatched runs' metrics."""

    what: str  # one of WHATS
    direction: str  # one of DIRECTIONS
    metric: str  # the metric's describe() line
    raw: np.ndarray  # (R, C) float32
    clean: float
    corrupted: float
    row_axis: str  # e.g. "layer"
    col_axis: str  # e.g. "position", "head", "key/value head"
    rows: tuple[str, ...]  # a label per row
    cols: tuple[str, ...]  # a label per column
    estimate: bool = False  # True: attribution patching's first-order estimate, not exact patches
    note: str = ""  # one line the view shows under the grid (e.g. how grouped heads are patched)

    @property
    def normalisable(self) -> bool:
        """False when clean and corrupted are too close for the normalised values to mean much."""
        return abs(self.clean - self.corrupted) >= MIN_NORMALISING_GAP

    @property
    def normalised(self) -> np.ndarray:
        """(R, C) on one scale for both directions: corrupted = 0, clean = 1. Denoising reads it
        as the share of the clean answer a patch restores; noising, as the share it leaves."""
        gap = self.clean - self.corrupted
        if gap == 0:
            return np.full_like(self.raw, np.nan)
        return ((self.raw.astype(np.float64) - self.corrupted) / gap).astype(np.float32)
