"""The first bytes of a file a user opened, or one clear line saying why they cannot be read."""

from __future__ import annotations

from transformer_viewer.model.errors import CheckpointError


def read_head(path: str, n: int) -> bytes:
    """Up to `n` bytes from the start of `path` (what decides its format)."""
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except PermissionError:
        raise CheckpointError(f"{path}: permission denied; make the file readable (chmod +r) and retry") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e}); check the path") from None
