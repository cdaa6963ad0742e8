"""`transformer-viewer patch` given hostile inputs: prompt-pairs files that are binary, huge,
endless (a FIFO), a folder, malformed or over the bounds on pairs and line length; and prompts
that would compute for minutes on a config claiming a huge context. Each is refused in one line
before the work or the memory it asks for; a well-formed pairs file runs."""

from __future__ import annotations

import os

from tests.hardening.cli_cases import CliCase
from tests.hardening.corpus_inputs import CONTEXT_32K, HUGE_CONTEXT, PROMPT_BYTES
from tests.helpers.hardening import save_tiny
from transformer_viewer.model.analysis.patching import pairs

GROUPS = ("patch_pairs", "patch_prompts")
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
COMMON = ("--device", "cpu", "--what", "heads", "--tokens", " Mary", " John")


def _write(root: str, name: str, data: bytes) -> str:
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _pairs(root: str, model: str) -> list[CliCase]:
    line = f"{CLEAN}\t{CORRUPTED}\n".encode()
    fifo = os.path.join(root, "pairs.fifo")
    os.mkfifo(fifo)
    os.makedirs(os.path.join(root, "pairs_folder"), exist_ok=True)
    files = {
        "patch_pairs_binary": (_write(root, "binary.tsv", bytes(range(256)) * 8), "not a text file"),
        "patch_pairs_huge": (_write(root, "huge.tsv", line * (pairs.MAX_PAIRS_BYTES // len(line) + 1)), "bytes"),
        "patch_pairs_too_many": (_write(root, "many.tsv", b"a\tb\n" * (pairs.MAX_PAIRS + 1)), "more than"),
        "patch_pairs_long_line": (_write(root, "long.tsv", b"a" * (pairs.MAX_LINE_CHARS + 1) + b"\tb\n"),
                                  "characters"),
        "patch_pairs_no_tab": (_write(root, "notab.tsv", b"only one prompt here\n"), "one tab"),
        "patch_pairs_three_fields": (_write(root, "three.tsv", b"a\tb\tc\n"), "2 tabs"),
        "patch_pairs_empty": (_write(root, "empty.tsv", b"\n\n"), "no prompt pairs"),
        "patch_pairs_fifo": (fifo, "fifo"),
        "patch_pairs_folder": (os.path.join(root, "pairs_folder"), "folder"),
        "patch_pairs_missing": (os.path.join(root, "missing.tsv"), "not found"),
    }
    cases = [CliCase(name, "patch_pairs", ("patch", model, "--pairs", path, *COMMON), expect)
             for name, (path, expect) in files.items()]
    good = _write(root, "good.tsv", line + f"{CORRUPTED}\t{CLEAN}\n".encode())
    cases.append(CliCase("patch_pairs_valid", "patch_pairs", ("patch", model, "--pairs", good, *COMMON, "--json"),
                         None))
    return cases


def _prompts(root: str, model: str) -> list[CliCase]:
    huge = save_tiny(os.path.join(root, "patch_huge_context.safetensors"), config=HUGE_CONTEXT)
    long_context = save_tiny(os.path.join(root, "patch_context_32k.safetensors"), config=CONTEXT_32K)
    big = "ab " * (PROMPT_BYTES // 3)
    out = os.path.join(root, "grid.npy")
    return [
        CliCase("patch_127kib_prompts_huge_context", "patch_prompts",
                ("patch", huge, "--clean", big, "--corrupted", big + "x", "--device", "cpu", "--what", "heads",
                 "--metric", "kl"), "attention scores"),
        CliCase("patch_long_exact_grid_by_position", "patch_prompts",
                ("patch", long_context, "--clean", "ab " * 300, "--corrupted", "ab " * 299 + "cd ", "--device", "cpu",
                 "--what", "resid", "--metric", "kl"), "add --estimate"),
        CliCase("patch_prompts_of_different_lengths", "patch_prompts",
                ("patch", model, "--clean", CLEAN, "--corrupted", CORRUPTED + " again", *COMMON[:2],
                 "--what", "attn", "--metric", "kl"), "differ in length"),
        CliCase("patch_out_into_a_missing_folder", "patch_prompts",
                ("patch", model, "--clean", CLEAN, "--corrupted", CORRUPTED, *COMMON,
                 "--out", os.path.join(root, "missing", "grid.npy")), "does not exist"),
        CliCase("patch_out_npy_valid", "patch_prompts",
                ("patch", model, "--clean", CLEAN, "--corrupted", CORRUPTED, *COMMON, "--out", out), None),
        CliCase("patch_out_onto_a_folder", "patch_prompts",
                ("patch", model, "--clean", CLEAN, "--corrupted", CORRUPTED, *COMMON,
                 "--out", os.path.join(root, "pairs_folder")), ".npy or .csv"),
    ]


def build(root: str) -> list[CliCase]:
    os.makedirs(root, exist_ok=True)
    model = save_tiny(os.path.join(root, "tiny.safetensors"))
    return _pairs(root, model) + _prompts(root, model)
