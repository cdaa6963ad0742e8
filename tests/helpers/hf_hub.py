"""A Hugging Face cache entry laid out as huggingface_hub writes one, built from a saved folder:
`models--{org}--{name}/blobs/<sha256 of the file>`, `snapshots/<commit>/<file>` a relative link
`../../blobs/<sha256>` (one more `../` per subfolder), and `refs/main` naming the commit."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def repo_dir(hub, repo: str) -> Path:
    return Path(hub) / ("models--" + repo.replace("/", "--"))


def cache_entry(hub, repo: str, folder: str, blobs_of: str | None = None) -> str:
    """Copy `folder`'s files into the cache under `repo`; the snapshot folder. `blobs_of`: store
    the blobs in that repository's blobs/ instead (links into another repository)."""
    base = repo_dir(hub, repo)
    blobs = repo_dir(hub, blobs_of or repo) / "blobs"
    snap = base / "snapshots" / COMMIT
    for d in (snap, base / "blobs", blobs, base / "refs"):
        d.mkdir(parents=True, exist_ok=True)
    for root, _dirs, files in os.walk(folder):
        for name in sorted(files):
            src = Path(root) / name
            digest = hashlib.sha256(src.read_bytes()).hexdigest()
            shutil.copyfile(src, blobs / digest)
            link = snap / src.relative_to(folder)
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(blobs / digest, link.parent), link)
    (base / "refs" / "main").write_text(COMMIT)
    return str(snap)
