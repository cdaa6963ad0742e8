"""Errors a user can act on: each carries one line saying what is wrong and what to do."""


class ModelError(Exception):
    """Base of every error the model package raises on purpose (never a bug)."""


class CheckpointError(ModelError):
    """A checkpoint could not be loaded or saved; the message is one actionable line."""


class DeviceError(ModelError):
    """The requested device is not available here."""


class CaptureTooLargeError(ModelError):
    """A trace would need more memory than the configured budget allows."""


class Cancelled(Exception):
    """A long computation stopped because its caller's `is_cancelled()` turned true (not an
    error: nothing is wrong, and the caller asked for it)."""


def stop_if_cancelled(is_cancelled) -> None:
    """Raise `Cancelled` once `is_cancelled()` is true (None: never cancelled)."""
    if is_cancelled is not None and is_cancelled():
        raise Cancelled
