"""Hostile inputs run through the real command line, all in one child process.

Each corpus module (`corpus_*.py` beside this file, listed in `CORPORA`) builds its files in a
temporary folder and returns `CliCase`s: the argv a user would type, and the fragment of the one
`error:` line it must print (or `expect=None` for a hostile-looking input that is valid and must
succeed). `run_cases` runs every case in ONE child process (the suite already spends much of CI's
time in torch start-ups), each with its own stdout and stderr captured at the file-descriptor level,
so a message printed by a Rust library or by C code is seen too.

For each case the child records the exit code (SystemExit included), anything that escaped
`main` (a BaseException other than SystemExit: a Rust panic, a RecursionError, ...), both
streams, and the child's peak resident memory so far (VmHWM; Linux carries `ru_maxrss` across
fork, VmHWM is the process's own). A case still running after `CASE_TIMEOUT_S` is interrupted by
SIGALRM and recorded as a hang: the timeout only catches hangs, it is no timed assertion.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

CASE_TIMEOUT_S = 120  # a case that runs this long is hung, not slow
PEAK_LIMIT_KB = 1024 * 1024  # 1 GB, torch's own ~300 MB included


@dataclass(frozen=True)
class CliCase:
    name: str  # short id, unique across the corpora
    group: str  # the class of hostile input
    argv: tuple[str, ...]  # what the user types after `transformer-viewer`
    expect: str | None  # fragment (lower case) of the one error line; None: must succeed (exit 0)
    keep: tuple[str, ...] = ()  # files whose bytes and mode must be unchanged afterwards
    env: dict = field(default_factory=dict)  # extra environment for this case (e.g. HF_HUB_CACHE)


@dataclass(frozen=True)
class CliOutcome:
    name: str
    rc: int | None
    out: str
    err: str
    escaped: str | None  # "PanicException: ..." when something other than SystemExit left main
    hung: bool
    peak_kb: int


CHILD = r"""
import json, os, signal, sys, tempfile

from transformer_viewer.viewer.cli.main import main

class Hung(BaseException):
    pass

def alarm(_sig, _frame):
    raise Hung()

signal.signal(signal.SIGALRM, alarm)
cases = json.load(open(sys.argv[1]))
timeout = int(sys.argv[3])
results = []
saved_out, saved_err = os.dup(1), os.dup(2)
for case in cases:
    for k, v in case["env"].items():
        os.environ[k] = v
    out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush(); sys.stderr.flush()
    os.dup2(out_f.fileno(), 1); os.dup2(err_f.fileno(), 2)
    rc, escaped, hung = None, None, False
    signal.alarm(timeout)
    try:
        rc = main(list(case["argv"]))
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Hung:
        hung = True
    except BaseException as e:  # noqa: BLE001 - recorded: the test fails on it
        escaped = f"{type(e).__name__}: {e}"[:500]
    finally:
        signal.alarm(0)
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(saved_out, 1); os.dup2(saved_err, 2)
    for k in case["env"]:
        os.environ.pop(k, None)
    texts = []
    for f in (out_f, err_f):
        f.seek(0)
        texts.append(f.read(1 << 20).decode("utf-8", "replace"))
        f.close()
    peak = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
    results.append(dict(name=case["name"], rc=rc, out=texts[0], err=texts[1], escaped=escaped, hung=hung,
                        peak_kb=peak))
    with open(sys.argv[2], "w") as f:  # after each case: a crash by signal still leaves the ones before
        json.dump(results, f)
"""


def run_cases(cases: list[CliCase], workdir: str) -> dict[str, CliOutcome]:
    """Every case through `transformer_viewer.viewer.cli.main.main` in one child process. A case
    missing from the answer crashed the child (a signal): it is reported with `rc=None` and the
    child's last stderr, and the cases after it run in a fresh child."""
    names = [c.name for c in cases]
    assert len(set(names)) == len(names), "case names must be unique"
    outcomes: dict[str, CliOutcome] = {}
    pending = list(cases)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.getcwd(), QT_QPA_PLATFORM="offscreen")
    while pending:
        listing = os.path.join(workdir, "cases.json")
        answer = os.path.join(workdir, "outcomes.json")
        with open(listing, "w") as f:
            json.dump([dict(name=c.name, argv=list(c.argv), env=c.env) for c in pending], f)
        if os.path.exists(answer):
            os.remove(answer)
        done = subprocess.run([sys.executable, "-c", CHILD, listing, answer, str(CASE_TIMEOUT_S)],
                              capture_output=True, text=True, env=env,
                              timeout=CASE_TIMEOUT_S * len(pending) + 120)
        results = json.load(open(answer)) if os.path.exists(answer) else []
        for r in results:
            outcomes[r["name"]] = CliOutcome(**r)
        pending = pending[len(results):]
        if pending:  # the child died during pending[0]
            dead = pending.pop(0)
            outcomes[dead.name] = CliOutcome(dead.name, None, "", f"child died: rc={done.returncode} "
                                             f"{done.stderr[-1500:]}", None, False, 0)
    return outcomes


def problems_of(case: CliCase, got: CliOutcome, kept_before: dict[str, tuple[bytes, int]]) -> list[str]:
    """What is wrong with one outcome: anything but one clear line (or success, for a valid input),
    a traceback, an escaped exception, a hang, a peak over 1 GB, a kept file changed or gone."""
    bad = []
    where = f"{case.name} ({' '.join(case.argv)[:120]})"
    if got.hung:
        bad.append(f"{where}: hung past {CASE_TIMEOUT_S} s")
    if got.escaped:
        bad.append(f"{where}: escaped main: {got.escaped}")
    for stream in (got.out, got.err):
        if "Traceback" in stream or "panicked" in stream:
            bad.append(f"{where}: traceback or panic printed: {stream[-600:]!r}")
    if case.expect is None:
        if got.rc != 0:
            bad.append(f"{where}: a valid input failed: rc={got.rc} err={got.err[-400:]!r}")
    else:
        lines = got.err.strip().splitlines()
        if got.rc != 2 or len(lines) != 1 or not lines[0].startswith("error: "):
            bad.append(f"{where}: not one error line with exit 2: rc={got.rc} err={got.err[-600:]!r}")
        elif case.expect not in lines[0].lower():
            bad.append(f"{where}: {lines[0]!r} does not say {case.expect!r}")
    if got.peak_kb > PEAK_LIMIT_KB:
        bad.append(f"{where}: peak memory {got.peak_kb // 1024} MiB")
    for path, (data, mode) in kept_before.items():
        if not os.path.exists(path):
            bad.append(f"{where}: {path} is gone")
            continue
        with open(path, "rb") as f:
            now = f.read()
        if now != data or os.stat(path).st_mode != mode:
            bad.append(f"{where}: {path} changed")
    return bad


def snapshot(paths) -> dict[str, tuple[bytes, int]]:
    out = {}
    for p in paths:
        with open(p, "rb") as f:
            out[p] = (f.read(), os.stat(p).st_mode)
    return out
