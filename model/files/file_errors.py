"""What a failed read of a checkpoint's file says: one CheckpointError line per kind of failure,
the same words wherever a file is read, with the caller's advice for what is not a regular file
and for any other error."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.model.files.regular_file import NotRegularFile

CHMOD = "make the file readable (chmod +r) and retry"


@contextlib.contextmanager
def read_errors(path: str, not_regular: str, other: str,
                denied: str = "make it readable and retry") -> Iterator[None]:
    """Inside the block, an OSError reading `path` becomes one CheckpointError line: permission
    denied (then `denied`), what was found instead of a regular file (then `not_regular`), or
    the system's reason (then `other`)."""
    try:
        yield
    except PermissionError:
        raise CheckpointError(f"{path}: permission denied; {denied}") from None
    except NotRegularFile as e:
        raise CheckpointError(f"{path}: {e.strerror}; {not_regular}") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e}); {other}") from None
