"""Outputs the user already has: a read-only file under `export --out` (any format, directly or
through a link), an existing checkpoint under `train --out` without `--resume` or `--overwrite`,
something that is not a regular file where a file is to be written. Each is refused in one line
and the user's file is left exactly as it was (bytes and mode)."""

from __future__ import annotations

import os

from tests.hardening.cli_cases import CliCase
from tests.helpers.hardening import save_tiny

GROUPS = ("outputs",)
TRAIN_FLAGS = ("--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--steps", "2",
               "--device", "cpu")


def build(root: str) -> list[CliCase]:
    os.makedirs(root, exist_ok=True)
    ckpt = save_tiny(os.path.join(root, "tiny.safetensors"))
    data = os.path.join(root, "data.txt")
    with open(data, "w") as f:
        f.write("The cat sat on the mat. " * 200)
    cases = []

    def export(out):
        return ("export", "--checkpoint", ckpt, "--prompt", "The cat sat", "--out", out)

    for ext in (".png", ".svg", ".pdf", ".npy", ".csv"):
        path = os.path.join(root, f"read_only{ext}")
        with open(path, "wb") as f:
            f.write(b"the user's own figure " + ext.encode())
        os.chmod(path, 0o444)
        cases.append(CliCase(f"export_read_only{ext}", "outputs", export(path), "read-only", keep=(path,)))
    target = os.path.join(root, "linked_read_only.png")
    with open(target, "wb") as f:
        f.write(b"behind a link")
    os.chmod(target, 0o444)
    link = os.path.join(root, "link.png")
    os.symlink(target, link)
    cases.append(CliCase("export_link_to_read_only", "outputs", export(link), "read-only", keep=(target,)))
    fifo = os.path.join(root, "pipe.png")
    os.mkfifo(fifo)
    cases.append(CliCase("export_onto_a_fifo", "outputs", export(fifo), "not a regular file"))
    other = os.path.join(root, "someone_elses.safetensors")
    save_tiny(other, seed=3)
    cases.append(CliCase("train_onto_a_checkpoint", "outputs",
                         ("train", "--data", data, "--out", other, *TRAIN_FLAGS), "already exists", keep=(other,)))
    locked = os.path.join(root, "locked.safetensors")
    save_tiny(locked, seed=4)
    os.chmod(locked, 0o444)
    cases.append(CliCase("train_overwrite_read_only", "outputs",
                         ("train", "--data", data, "--out", locked, "--overwrite", *TRAIN_FLAGS), "read-only",
                         keep=(locked,)))
    return cases
