"""Calls into the Rust-backed libraries (tokenizers, tiktoken, safetensors), made safe to fail.

A Rust library that panics raises pyo3's `PanicException`, which derives from BaseException, not
Exception: an `except Exception` lets it through, so it would end the CLI with a traceback and the
worker thread with it. `library_call` turns a panic (and any other BaseException but the ones that
stop the program: KeyboardInterrupt, SystemExit, GeneratorExit) into our one-line error, and, when
asked, the library's ordinary exceptions too (the tokenizers library raises a plain `Exception`
for a text its model cannot encode). Rust prints a panic's own message to stderr before Python
sees anything, so what a library is known to panic on is validated before the call
(`tokenizer_spec`); this guard is for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

from transformer_viewer.model.errors import ModelError

# What stops the program rather than reporting a failure: never caught here.
PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit)
MAX_DETAIL = 200  # characters of the library's own message kept in our line


def is_panic(e: BaseException) -> bool:
    """Whether `e` is a Rust panic surfacing through pyo3 (each extension defines its own
    `pyo3_runtime.PanicException`, so it is known by name, not by class)."""
    return type(e).__name__ == "PanicException"


def detail_of(e: BaseException) -> str:
    """The first line of a library's message, shortened (a panic's message may hold a backtrace)."""
    lines = str(e).strip().splitlines()
    line = lines[0].strip() if lines else type(e).__name__
    return line if len(line) <= MAX_DETAIL else line[:MAX_DETAIL - 1] + "…"


@contextmanager
def library_call(what: str, fix: str, error: type[ModelError] = ModelError, library_errors: bool = False,
                 on_panic: Callable[[str], None] | None = None):
    """Run the body's library call; a panic becomes `error(f"{what} (...); {fix}")`, one line.

    `library_errors`: the library's ordinary exceptions (Exception, not ours) become that line
    too, for calls whose plain exceptions mean bad input rather than a bug of ours.
    `on_panic(message)`: called before raising for a panic (or another BaseException), to drop
    what the failed call may have left inconsistent."""
    try:
        yield
    except PASS_THROUGH:
        raise
    except ModelError:
        raise
    except Exception as e:  # noqa: BLE001 - the library's own errors, wrapped only when asked
        if not library_errors:
            raise
        raise error(f"{what} ({detail_of(e)}); {fix}") from None
    except BaseException as e:  # noqa: BLE001 - a Rust panic is a BaseException
        kind = "the library panicked" if is_panic(e) else f"the library failed with {type(e).__name__}"
        message = f"{what} ({kind}: {detail_of(e)}); {fix}"
        if on_panic is not None:
            on_panic(message)
        raise error(message) from None
