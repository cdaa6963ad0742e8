"""A model name (`gpt2`, `distilgpt2`, `openai-community/gpt2-medium`, ...) looked up in the local
Hugging Face cache and loaded offline. Nothing is ever downloaded: a name that is not in the
cache is an error that says so.

The cache layout is `<hub>/models--{org}--{name}/snapshots/<revision>/{config.json, ...}`, with
`refs/main` naming the revision last fetched; `<hub>` is `$HF_HUB_CACHE`, else `$HF_HOME/hub`,
else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`. We read it with plain
file operations, so neither huggingface_hub nor a network is involved.
"""

from __future__ import annotations

import os
import re

from transformer_viewer.model.checkpoints.formats import huggingface
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import untrusted_json

# The GPT-2 checkpoints moved under organisations; a cache may hold either spelling.
ALIASES = {
    "gpt2": ("openai-community/gpt2",),
    "gpt2-medium": ("openai-community/gpt2-medium",),
    "gpt2-large": ("openai-community/gpt2-large",),
    "gpt2-xl": ("openai-community/gpt2-xl",),
    "distilgpt2": ("distilbert/distilgpt2",),
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_FILE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".json", ".pkl", ".pickle", ".tar", ".zip")


def looks_like_name(source: str) -> bool:
    """`gpt2` or `org/name`, not something that reads as a file path."""
    return bool(_NAME.match(source)) and not source.lower().endswith(_FILE_SUFFIXES) and ".." not in source


def hub_dirs() -> list[str]:
    """Cache folders to search, most specific first (as huggingface_hub resolves them)."""
    env = os.environ
    dirs = []
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            dirs.append(env[var])
    if env.get("HF_HOME"):
        dirs.append(os.path.join(env["HF_HOME"], "hub"))
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    dirs.append(os.path.join(xdg, "huggingface", "hub"))
    seen, out = set(), []
    for d in dirs:
        d = os.path.abspath(os.path.expanduser(d))
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def find_snapshot(name: str) -> str | None:
    """The cached snapshot folder for `name` that has a config.json, or None."""
    for repo in (name, *ALIASES.get(name, ())):
        for hub in hub_dirs():
            repo_dir = os.path.join(hub, "models--" + repo.replace("/", "--"))
            snap = _snapshot_in(repo_dir)
            if snap is not None:
                return snap
    return None


def _snapshot_in(repo_dir: str) -> str | None:
    snapshots = os.path.join(repo_dir, "snapshots")
    if not os.path.isdir(snapshots):
        return None
    ref = untrusted_json.read_small_text(os.path.join(repo_dir, "refs", "main"))
    candidates = [ref] if ref else []
    try:
        entries = os.listdir(snapshots)
    except OSError:
        entries = []
    # Newest first, so a cache without refs/main still yields the latest fetch. An entry that
    # cannot be stat'ed (a dangling or looping link) is skipped, not allowed to hide the others.
    dated = []
    for rev in entries:
        try:
            dated.append((os.path.getmtime(os.path.join(snapshots, rev)), rev))
        except OSError:
            continue
    others = [rev for _mtime, rev in sorted(dated, reverse=True)]
    for rev in candidates + others:
        if rev and rev not in (".", "..") and os.sep not in rev and huggingface.is_hf_folder(os.path.join(snapshots, rev)):
            return os.path.join(snapshots, rev)
    return None


def not_downloaded(name: str) -> CheckpointError:
    where = " or ".join(hub_dirs()[:2])
    return CheckpointError(
        f"{name}: no such file or folder, and no model of that name is downloaded in the Hugging Face cache "
        f"({where}); transformer-viewer never downloads: fetch it once (e.g. `hf download {name}`) or give a path")


def read_cached(name: str, snapshot: str, n_head: int | None = None):
    """(config, state, info) of a cached model, named by `name` rather than its revision hash."""
    if huggingface.weights_file(snapshot) is None:
        raise CheckpointError(f"{name}: the Hugging Face cache has its config.json but not its weights "
                              f"({snapshot}); fetch model.safetensors once, we never download")
    return huggingface.read_folder(snapshot, name=name)
