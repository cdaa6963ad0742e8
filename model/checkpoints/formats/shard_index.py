"""A sharded checkpoint's `*.index.json`: which file holds which tensor, read as untrusted.

The index names shard files relative to its folder. Before any shard is opened, every name is
resolved and checked: a name that leads out of the folder (`../x`, an absolute path, a link to
elsewhere but a cache snapshot's own blobs/) is refused, not reported missing; names for the same file (`a/../x`, a hard or symbolic link to
it) count once, so each file is read once however often the index repeats it; and an index
naming more files than any model has is refused outright. A shard is read by what it holds
(safetensors or a torch pickle), so a wrong file is called what it is, and it may hold only the
tensors the index puts in it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from transformer_viewer.model.checkpoints import load_watch
from transformer_viewer.model.checkpoints.formats import pickle_safe, safetensors_file
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files import folder_files, regular_file, untrusted_json
from transformer_viewer.model.files.file_errors import read_errors
from transformer_viewer.model.files.file_head import HEAD_BYTES, describe, read_head

MAX_SHARDS = 1024  # the largest public models have a few hundred shards
FIX = "restore the index or download the model again"


def shard_files(index_path: str) -> list[tuple[str, str]]:
    """(name as the index says it, path) of each distinct shard file, in name order."""
    return _shards(index_path)[1]


def _shards(index_path: str) -> tuple[dict[str, str], list[tuple[str, str]], dict[str, str]]:
    """The weight map, `shard_files`, and each name the index uses -> the name its file is listed by."""
    weight_map = _weight_map(index_path)
    names = sorted(set(weight_map.values()))
    if len(names) > MAX_SHARDS:
        raise CheckpointError(f"{index_path}: names {len(names):,} shard files, more than any model has "
                              f"({MAX_SHARDS}); the index is damaged: {FIX}")
    folder = os.path.dirname(os.path.abspath(index_path))
    files: dict[tuple[int, int], tuple[str, str]] = {}
    listed_as: dict[str, tuple[int, int]] = {}
    for name in names:
        if "\x00" in name:  # no file system has such a name; the path functions would raise on it
            raise CheckpointError(f"{index_path}: shard {name!r} refused: a file name with a NUL byte; {FIX}")
        path = os.path.normpath(os.path.join(folder, name))
        if os.path.isabs(name) or os.path.commonpath([folder, path]) != folder:
            raise CheckpointError(f"{index_path}: shard {name} refused: outside the checkpoint folder; an index may "
                                  "only name files in its own folder")
        folder_files.check_inside(folder, path)  # nor through a link that leaves it
        try:
            st = regular_file.check_regular(path)
        except regular_file.NotRegularFile as e:
            raise CheckpointError(f"{index_path}: shard {name} is {e.strerror}; download every shard again") from None
        except FileNotFoundError as e:
            what = "is missing" if not os.path.islink(path) else f"is {e.strerror}"
            raise CheckpointError(f"{index_path}: shard {name} {what}; download every shard") from None
        except OSError as e:
            raise CheckpointError(f"{index_path}: shard {name} cannot be read ({e.strerror or e}); download every "
                                  "shard") from None
        files.setdefault((st.st_dev, st.st_ino), (name, path))  # one read per file, whatever its names
        listed_as[name] = (st.st_dev, st.st_ino)
    return weight_map, sorted(files.values()), {name: files[key][0] for name, key in listed_as.items()}


def load_shards(index_path: str, load_safetensors: Callable[[str], dict],
                load_pickled: Callable[[str], dict]) -> dict[str, torch.Tensor]:
    """Every tensor of every shard, each file read once and by what it holds."""

    state: dict[str, torch.Tensor] = {}
    weight_map, files, listed_as = _shards(index_path)
    for name, path in files:
        load_watch.check_cancelled()  # a pickled shard is read in one call: stop between them
        head = read_head(path, HEAD_BYTES)
        if safetensors_file.header_if_safetensors(path, head) is not None:
            part = load_safetensors(path)
        elif pickle_safe.looks_like_pickle(head):
            part = load_pickled(path)
        else:
            found = describe(head, regular_file.size_of_path(path)) if head else "an empty file"
            raise CheckpointError(f"{index_path}: shard {name} is not a weights file (found {found}); the index "
                                  f"names the wrong file: {FIX}")
        check_placement(index_path, name, part, weight_map, listed_as)
        state.update(part)
    return state


def check_placement(index_path: str, name: str, part: dict, weight_map: dict[str, str],
                    listed_as: dict[str, str]) -> None:
    """Every tensor shard `name` holds is one the index puts in that file. A tensor that two
    shards hold would otherwise be taken from whichever is read last, whatever the index says
    (a stale shard beside a fresh one gives a model of the wrong weights without a word)."""
    for key in part:
        where = weight_map.get(key)
        if where is None:
            raise CheckpointError(f"{index_path}: shard {name} holds {_short(key)}, which the index does not list; "
                                  f"the shards and the index do not belong together: {FIX}")
        if listed_as[where] != name:
            raise CheckpointError(f"{index_path}: shard {name} holds {_short(key)}, which the index puts in {where}; "
                                  f"a tensor is read only from the shard the index names: {FIX}")


def _short(key: str) -> str:
    return key if len(key) <= 120 else key[:120] + "…"


def _weight_map(index_path: str) -> dict[str, str]:
    with read_errors(index_path, FIX, FIX):
        index = untrusted_json.read_file(index_path, FIX, where=f"{index_path}: not a valid shard index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) and v for v in weight_map.values()):
        raise CheckpointError(f"{index_path}: not a valid shard index (it needs a weight_map from tensor names to "
                              f"file names); {FIX}")
    return weight_map
