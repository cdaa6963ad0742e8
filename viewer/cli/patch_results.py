"""What `patch` reports of a grid, shared with `export --view patching`: the JSON of every cell
(`--json`) and the `.json` sidecar beside a grid's raw values."""

from __future__ import annotations

import os


def as_json(grid, session, prompts: dict, metrics, intervention) -> dict:
    """What the command reports: the model, the `prompts` ({"clean", "corrupted"}, or a pairs
    file's "pairs" and "pairs_file"), the metric and every cell."""
    tok = session.tokenizer
    normalised = grid.normalised
    cells = [{"row": grid.rows[r], "col": grid.cols[c], "r": r, "c": c, "raw": float(grid.raw[r, c]),
              "normalised": float(normalised[r, c])}
             for r in range(grid.raw.shape[0]) for c in range(grid.raw.shape[1])]
    first = metrics[0]
    return {"model": session.loaded.name, "source": session.loaded.source, **prompts,
            "what": grid.what, "direction": grid.direction, "estimate": grid.estimate,
            "metric": {"kind": first.kind, "describe": grid.metric, "position": first.position,
                       "tokens": [list(m.tokens) for m in metrics] if "pairs" in prompts else list(first.tokens),
                       "token_text": [tok.token_bytes(t).decode("utf-8", "replace") for t in first.tokens]},
            "clean_metric": grid.clean, "corrupted_metric": grid.corrupted,
            "normalisation": "(raw - corrupted_metric) / (clean_metric - corrupted_metric): corrupted = 0, clean = 1",
            "normalisable": grid.normalisable,
            "intervention": intervention.describe(),
            "clamps": [c.describe() for c in intervention.clamps],
            "note": grid.note, "row_axis": grid.row_axis, "col_axis": grid.col_axis,
            "rows": list(grid.rows), "cols": list(grid.cols), "cells": cells}


def write_sidecar(grid, result: dict, path: str) -> None:
    """`path`.json beside a grid's raw values: everything `result` says but the cells."""
    import json

    from transformer_viewer.viewer.cli.common import json_safe
    from transformer_viewer.viewer.export import write_file

    sidecar = {k: v for k, v in result.items() if k != "cells"}
    sidecar.update(file=os.path.basename(path), shape=list(grid.raw.shape), dtype=str(grid.raw.dtype),
                   values="the raw metric of each patched run (NaN: not computed)")
    write_file(path + ".json", (json.dumps(json_safe(sidecar), indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
