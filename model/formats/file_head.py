"""The first bytes of a file a user opened, or one clear line saying why they cannot be read."""

from __future__ import annotations

from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.formats import regular_file


def read_head(path: str, n: int) -> bytes:
    """Up to `n` bytes from the start of `path` (what decides its format); a path that is no
    regular file (a pipe, a device) is refused saying what it is, unread."""
    try:
        return regular_file.read_head(path, n)
    except PermissionError:
        raise CheckpointError(f"{path}: permission denied; make the file readable (chmod +r) and retry") from None
    except regular_file.NotRegularFile as e:
        raise CheckpointError(f"{path}: {e.strerror}; put the checkpoint file itself there") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e}); check the path") from None
