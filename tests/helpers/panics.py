"""A real Rust panic from the tokenizers library, for the tests of what survives one: pyo3's
`PanicException` cannot be imported by name, so it is taken from a panic the library really
raises (a Precompiled normalizer whose charsmap is two bytes, read without the checks the project
makes before reading)."""

from __future__ import annotations

import functools
import json


@functools.lru_cache(maxsize=1)
def panic_type() -> type[BaseException]:
    from tokenizers import Tokenizer

    spec = {"version": "1.0", "normalizer": {"type": "Precompiled", "precompiled_charsmap": "AQA="},
            "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}
    try:
        Tokenizer.from_str(json.dumps(spec))
    except BaseException as e:  # noqa: BLE001 - the panic is what is wanted
        if type(e).__name__ == "PanicException":
            return type(e)
        raise
    raise AssertionError("the tokenizers library no longer panics on a two-byte charsmap")


def a_panic(message: str = "index out of bounds: the len is 1024 but the index is 2145") -> BaseException:
    """A PanicException as the library raises it."""
    return panic_type()(message)
