"""The files a model folder may read: its own, not whatever a symbolic link inside it leads to.

A folder is untrusted like every checkpoint, and a link in it can point anywhere (another
model's weights, a private file whose bytes would then show in an error message). So a file the
folder names (config.json, the weights, each shard of an index, the tokenizer files) must resolve
inside the folder, with one exception: a Hugging Face cache snapshot,
`models--{org}--{name}/snapshots/<revision>/`, stores every file as a link into its own
repository's `blobs/` folder, and may lead there, and only there (not into another repository's
blobs). Files the user names directly are theirs to point anywhere; this is about the files a
folder brings along.
"""

from __future__ import annotations

import os

from transformer_viewer.model.errors import CheckpointError

BLOBS = "blobs"


def check_inside(folder: str, path: str) -> str:
    """`path` (a file of `folder`) when it resolves inside the folder, or inside the folder's own
    cache blobs/ when the folder is a cache snapshot; else one CheckpointError line."""
    real_folder = os.path.realpath(folder)
    real = os.path.realpath(path)
    if _within(real, real_folder):
        return path
    blobs = snapshot_blobs(real_folder)
    if blobs is not None and os.path.dirname(real) == blobs:
        return path
    rule = ("a cache snapshot may link only into its own repository's blobs/" if blobs is not None
            else "a model folder's files must lie inside it")
    raise CheckpointError(f"{path}: a symbolic link to {real}, outside the model folder ({rule}); copy the file "
                          "into the folder")


def snapshot_blobs(real_folder: str) -> str | None:
    """The blobs/ folder of the cache repository whose snapshot `real_folder` (already resolved)
    is, or None when it is not laid out as one. A blobs/ that is itself a link elsewhere does
    not count: it would let a snapshot reach any folder."""
    snapshots = os.path.dirname(real_folder)
    repo = os.path.dirname(snapshots)
    if os.path.basename(snapshots) != "snapshots" or not os.path.basename(repo).startswith("models--"):
        return None
    blobs = os.path.join(repo, BLOBS)
    if not os.path.isdir(blobs) or os.path.realpath(blobs) != blobs:
        return None
    return blobs


def _within(path: str, folder: str) -> bool:
    return os.path.commonpath([folder, path]) == folder
