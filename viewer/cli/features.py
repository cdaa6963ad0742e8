"""`transformer-viewer features [CHECKPOINT] --sae PATH[@HOOK] (repeatable) --prompt TEXT
[--top N] [--bos] [--clamp ...] [--json | --out FILE.csv|.npy]`: each token's most active
features of each SAE.

`--json` prints one object: {"tokens": [{"id", "text"}...], "features": one list per token of its
top N {"id": int, "activation": float}, highest first (the first --sae's), "saes": [{"index",
"name", "hook", "info", "features"}...] (every --sae's)}. `--out FILE.csv` writes rows
sae,position,token,rank,feature,activation; `--out FILE.npy` a (n_sae, T, N) array of
(id int32, activation float32) records, id -1 where fewer than N features fire. The BOS token's
list is left empty unless `--bos`.
"""

from __future__ import annotations

import argparse
import io
import sys

import numpy as np

from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.common import add_ablation_argument, add_checkpoint_arguments
from transformer_viewer.viewer.cli.sae_options import add_clamp_argument, add_sae_argument

RECORD = np.dtype([("id", "<i4"), ("activation", "<f4")])


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(p)
    add_sae_argument(p, required=True)
    p.add_argument("--prompt", required=True, help="the text to run")
    p.add_argument("--top", type=int, default=10, help="features listed per token (default: 10)")
    p.add_argument("--bos", action="store_true", help="list the BOS token's features too (left out by default)")
    add_clamp_argument(p)
    p.add_argument("--mask", nargs="+", action="extend", default=[], metavar="L.H", help="ablate these heads in the run")
    add_ablation_argument(p)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    out.add_argument("--out", default=None, help="write the lists to FILE.csv or FILE.npy")


def run(args) -> int:
    from transformer_viewer.viewer.cli.common import (
        check_mask_syntax,
        intervention_from_args,
        session_for_prompt,
    )
    from transformer_viewer.viewer.cli.sae_options import attach_saes, check_sae_syntax, clamps_from_args

    if args.top < 1:
        raise ModelError(f"--top must be at least 1, got {args.top}")
    if args.out is not None and not args.out.lower().endswith((".csv", ".npy")):
        raise ModelError(f"--out {args.out}: the features are written as .csv or .npy")
    check_mask_syntax(args.mask)
    check_sae_syntax(args)
    session = session_for_prompt(args)
    saes = attach_saes(args, session)
    T = len(session.tokens.ids)
    intervention = intervention_from_args(args, session.config, clamps=clamps_from_args(args, T))
    from transformer_viewer.model.analysis.sae_features import token_features
    from transformer_viewer.viewer.cli.common import refuse_non_finite

    results = []
    for index, sae in enumerate(saes):
        top = min(args.top, sae.config.d_sae)
        found = token_features(session, index, top=top, intervention=intervention, skip_bos=not args.bos)
        refuse_non_finite(f"SAE {index}'s feature activations", found.acts.ravel().tolist())
        results.append(found)
    if args.out is not None:
        write_features(args.out, results, session.tokens.labels)
    elif args.json:
        from transformer_viewer.viewer.cli.common import write_json_or_print

        write_json_or_print(as_json(session, saes, results), None)
    else:
        print(format_text(session, saes, results))
    return 0


def _lists(found) -> list[list[dict]]:
    return [[{"id": int(i), "activation": float(a)} for i, a in zip(ids, acts, strict=True) if i >= 0]
            for ids, acts in zip(found.ids, found.acts, strict=True)]


def as_json(session, saes, results) -> dict:
    tok = session.tokenizer
    each = [{"index": i, "name": s.name, "hook": s.config.hook, "info": s.info, "features": _lists(r)}
            for i, (s, r) in enumerate(zip(saes, results, strict=True))]
    return {
        "tokens": [{"id": int(i), "text": tok.token_bytes(int(i)).decode("utf-8", errors="replace")}
                   for i in session.tokens.ids],
        "features": each[0]["features"],
        "saes": each,
    }


def write_features(path: str, results, labels) -> None:
    from transformer_viewer.viewer.export import write_file

    if path.lower().endswith(".npy"):
        records = np.zeros((len(results), *results[0].ids.shape[:1], max(r.ids.shape[1] for r in results)), RECORD)
        records["id"] = -1
        for n, r in enumerate(results):
            records["id"][n, :, : r.ids.shape[1]] = r.ids
            records["activation"][n, :, : r.ids.shape[1]] = r.acts
        buf = io.BytesIO()
        np.save(buf, records, allow_pickle=False)
        data = buf.getvalue()
    else:
        import csv

        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["sae", "position", "token", "rank", "feature", "activation"])
        for n, r in enumerate(results):
            for t, (ids, acts) in enumerate(zip(r.ids, r.acts, strict=True)):
                for rank, (i, a) in enumerate(zip(ids, acts, strict=True), 1):
                    if i >= 0:
                        writer.writerow([n, t, labels[t], rank, int(i), f"{float(a):.9g}"])
        data = text.getvalue().encode("utf-8")
    print(f"wrote {write_file(path, data)}", file=sys.stderr)


def format_text(session, saes, results) -> str:
    labels = session.tokens.labels
    lines = []
    for index, (sae, r) in enumerate(zip(saes, results, strict=True)):
        lines.append(f"SAE {index}: {sae.info}")
        for t, (ids, acts) in enumerate(zip(r.ids, r.acts, strict=True)):
            shown = ", ".join(f"{int(i)} ({float(a):.3g})" for i, a in zip(ids, acts, strict=True) if i >= 0)
            note = "BOS, left out (--bos lists it)" if t == 0 and r.bos_left_out else (shown or "no feature fires")
            lines.append(f"  {t:>5} {labels[t]!r:<16} {note}")
    return "\n".join(lines)
