"""The command line run in-process: exit code, stdout and stderr, and the one-line error check."""

from __future__ import annotations

from transformer_viewer.viewer.cli.main import main


def cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def error_line(rc: int, out: str, err: str) -> str:
    """The single `error: ...` line of a refused command (exit 2, no traceback)."""
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]
