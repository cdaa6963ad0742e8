"""Where an SAE is: `PATH@HOOK` parsed, and a path or `REPO_ID/SUBFOLDER` resolved to an
SAELens folder or a `params.npz`, a cached repository's subfolder found in the local Hugging
Face cache by plain file operations (nothing is ever downloaded)."""

from __future__ import annotations

import os
import re

from transformer_viewer.model.checkpoints.formats import hf_cache
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files import folder_files, untrusted_json

CFG = "cfg.json"
WEIGHTS = "sae_weights.safetensors"
NPZ = "params.npz"
_HOOK_SUFFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,199}$")


def parse_sae_spec(text: str) -> tuple[str, str | None]:
    """`PATH@HOOK` -> (PATH, HOOK); a text without a hook part -> (text, None). The hook is what
    follows the last `@` when that reads as a hook name (a path may hold `@` elsewhere)."""
    path, at, hook = text.rpartition("@")
    if at and path and _HOOK_SUFFIX.match(hook) and "." in hook:
        return path, hook
    return text, None


def locate(path: str, root: str | None = None) -> tuple[str, str, str]:
    """(file or folder, "saelens"|"npz", the folder its files must lie in) for a path or a
    cached repository's subfolder (whose files may link into that repository's blobs/)."""
    if os.path.lexists(path):
        if os.path.isdir(path):
            if os.path.lexists(os.path.join(path, CFG)):
                return path, "saelens", root or path
            if os.path.lexists(os.path.join(path, NPZ)):
                return folder_files.check_inside(root or path, os.path.join(path, NPZ)), "npz", root or path
            raise ModelError(f"{path}: neither an SAELens folder ({CFG} and {WEIGHTS}) nor one holding {NPZ}; "
                             "give the SAE's folder")
        base = os.path.basename(path)
        if base.endswith(".npz"):
            return path, "npz", root or os.path.dirname(path) or "."
        if base in (CFG, WEIGHTS):
            folder = os.path.dirname(path) or "."
            return folder, "saelens", root or folder
        raise ModelError(f"{path}: not an SAE file: give an SAELens folder, its {CFG}, or a {NPZ}")
    cached = find_cached(path)
    if cached is None:
        raise ModelError(f"{path}: no such file or folder, and no such REPO_ID/SUBFOLDER in the Hugging Face cache "
                         f"({' or '.join(hf_cache.hub_dirs()[:2])}); transformer-viewer never downloads: fetch it once "
                         "(e.g. `hf download REPO_ID --include 'SUBFOLDER/*'`) or give a path")
    return locate(*cached)


def find_cached(spec: str) -> tuple[str, str] | None:
    """(the cached subfolder or file, its snapshot) of `org/repo/sub/folder`, or None (never a
    download)."""
    parts = spec.strip("/").split("/")
    if len(parts) < 3 or any(p in ("", ".", "..") for p in parts) or not hf_cache.looks_like_name("/".join(parts[:2])):
        return None
    repo, sub = "--".join(parts[:2]), os.path.join(*parts[2:])
    for hub in hf_cache.hub_dirs():
        snapshots = os.path.join(hub, "models--" + repo, "snapshots")
        ref = untrusted_json.read_small_text(os.path.join(hub, "models--" + repo, "refs", "main"))
        try:
            revisions = sorted(os.listdir(snapshots), key=lambda r: (r != ref, r))
        except OSError:
            continue
        for rev in revisions:
            if os.sep in rev or rev in (".", ".."):
                continue
            snapshot = os.path.join(snapshots, rev)
            candidate = os.path.join(snapshot, sub)
            if os.path.isdir(candidate) or os.path.isfile(candidate):
                return folder_files.check_inside(snapshot, candidate), snapshot
    return None
