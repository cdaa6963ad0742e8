"""Prompt pairs: a file of clean/corrupted prompts, one pair a line, tab-separated, whose
patching results are averaged (each pair's grid, then the mean of the raw values and of the
clean and corrupted metrics, normalised from those means).

The file is untrusted like every file a user opens: its size, its number of pairs and each
line's length are bounded before anything is tokenized or run.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from transformer_viewer.model.analysis.patching.exact import patch_grid
from transformer_viewer.model.analysis.patching.grid import PatchGrid
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files.text_file import decode_text, read_text_file

MAX_PAIRS_BYTES = 1 << 20  # a pairs file of hundreds of pairs is a few tens of KB
MAX_PAIRS = 256  # each pair is a whole patching grid of its own
MAX_LINE_CHARS = 8192  # one line: two prompts and a tab


def parse_pairs(text: str, where: str) -> list[tuple[str, str]]:
    """(clean, corrupted) of each non-blank line of `text`; `where` names the file in messages."""
    pairs = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_CHARS:
            raise ModelError(f"{where}: line {n} has {len(line):,} characters, over {MAX_LINE_CHARS:,}; "
                             "write one clean and one corrupted prompt a line")
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise ModelError(f"{where}: line {n} is not a clean and a corrupted prompt separated by one tab "
                             f"({len(fields) - 1} tabs); write CLEAN<TAB>CORRUPTED")
        pairs.append((fields[0], fields[1]))
        if len(pairs) > MAX_PAIRS:
            raise ModelError(f"{where}: more than {MAX_PAIRS} prompt pairs; give at most {MAX_PAIRS}")
    if not pairs:
        raise ModelError(f"{where}: no prompt pairs; write one CLEAN<TAB>CORRUPTED pair a line")
    return pairs


def read_pairs(path: str) -> list[tuple[str, str]]:
    """The prompt pairs of the file `path`, bounded and checked (one ModelError line if not)."""
    raw = read_text_file(path, MAX_PAIRS_BYTES, "a prompt-pairs file may hold",
                         f"give at most {MAX_PAIRS_BYTES >> 20} MB of pairs", what="prompt-pairs file")
    return parse_pairs(decode_text(raw, path, "prompt-pairs file"), path)


def mean_grid(grids: list[PatchGrid]) -> PatchGrid:
    """The grids of several pairs as one: the mean of their raw values and of their clean and
    corrupted metrics (so the normalisation is of the means). By-position grids need pairs of
    one length; columns are then labelled by position alone."""
    first = grids[0]
    for g in grids[1:]:
        if g.raw.shape != first.raw.shape:
            raise ModelError(f"the prompt pairs tokenize to different lengths ({first.raw.shape[1]} and "
                             f"{g.raw.shape[1]} positions), so their {first.what} grids cannot be averaged by "
                             "position; give pairs of one length, or patch heads, pattern, q, k or v")
    raw = np.mean(np.stack([g.raw for g in grids]).astype(np.float64), axis=0).astype(np.float32)
    cols = tuple(str(c) for c in range(raw.shape[1])) if first.col_axis == "position" else first.cols
    note = f"mean over {len(grids)} prompt pairs" + (f"; {first.note}" if first.note else "")
    metrics = dict.fromkeys(g.metric for g in grids)
    metric = first.metric if len(metrics) == 1 else f"each pair's own tokens: {'; '.join(metrics)}"
    return dataclasses.replace(first, metric=metric, raw=raw, clean=float(np.mean([g.clean for g in grids])),
                               corrupted=float(np.mean([g.corrupted for g in grids])), cols=cols, note=note)


def patch_grid_over_pairs(session, pairs, what: str, metric_for, direction: str = "denoise", intervention=None,
                          layer: int | None = None, progress=None, is_cancelled=None) -> PatchGrid:
    """`patch_grid` of each (clean, corrupted) pair set as the session's prompts, averaged
    (`mean_grid`). `metric_for(session)` gives each pair's metric (the same one, or one whose
    tokens follow the pair's predictions). `progress(done, total)` counts pairs."""
    grids = []
    for i, (clean, corrupted) in enumerate(pairs):
        session.set_prompt(clean)
        session.set_corrupted(corrupted)
        grids.append(patch_grid(session, what, metric_for(session), direction, intervention, layer,
                                is_cancelled=is_cancelled))
        if progress is not None:
            progress(i + 1, len(pairs))
    return mean_grid(grids)
