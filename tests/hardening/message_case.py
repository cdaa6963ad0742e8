"""What a message trigger is, shared by `test_messages.py` and the `messages_*.py` case lists beside it.

A module `tests/hardening/messages_<area>.py` defining `CASES: list[Case]` is picked up by
`test_messages.py`, so each area keeps its triggers next to each other without editing one long table.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from dataclasses import dataclass
from pathlib import Path

from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.errors import ModelError
from transformer_viewer.viewer.cli.main import main


@dataclass(frozen=True)
class Case:
    name: str
    trigger: object  # (ctx) -> the message the user sees
    expect: str


class Ctx:
    """What triggers need: a scratch folder, the tiny model, a CLI runner, monkeypatch."""

    def __init__(self, tmp_path, tiny_ckpt, monkeypatch, loaded=None):
        self.tmp, self.ckpt, self.mp = tmp_path, tiny_ckpt, monkeypatch
        self._loaded = loaded

    def session(self, **kw) -> Session:
        if self._loaded is None:
            self._loaded = load_checkpoint(self.ckpt, device="cpu")
        return Session(self._loaded, **kw)

    def cli(self, *argv) -> str:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(argv))
        out, err = out.getvalue(), err.getvalue()
        lines = err.strip().splitlines()
        assert rc == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), (rc, err)
        return lines[0].removeprefix("error: ")


def raised(fn, *exc_types):
    exc_types = exc_types or (ModelError,)
    try:
        fn()
    except exc_types as e:
        return str(e)
    raise AssertionError("no error was raised")


def area_cases() -> list[Case]:
    """The CASES of every `messages_*.py` module in this folder, in file-name order."""
    out: list[Case] = []
    for path in sorted(Path(__file__).parent.glob("messages_*.py")):
        out += importlib.import_module(f"tests.hardening.{path.stem}").CASES
    return out
