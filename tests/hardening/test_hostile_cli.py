"""Every hostile input of the command-line corpora (`corpus_*.py` listed here), run in one child
process: one clear line (or success, for a valid input), no traceback or panic, no hang, a peak
under 1 GB, and every file the user had left as it was. See `cli_cases.py`."""

from __future__ import annotations

import os

import pytest

from tests.hardening import (
    corpus_configs,
    corpus_files,
    corpus_inputs,
    corpus_outputs,
    corpus_patch,
    corpus_sessions,
    corpus_tokenizers,
)
from tests.hardening.cli_cases import problems_of, run_cases, snapshot

CORPORA = (corpus_outputs, corpus_files, corpus_configs, corpus_inputs, corpus_tokenizers, corpus_patch,
           corpus_sessions)
GROUPS = [g for module in CORPORA for g in module.GROUPS]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("the child's peak memory is read from /proc (Linux)")
    cases = []
    for module in CORPORA:
        cases += module.build(str(tmp_path_factory.mktemp(module.__name__.rsplit(".", 1)[-1])))
    kept = snapshot(p for c in cases for p in c.keep)
    got = run_cases(cases, str(tmp_path_factory.mktemp("cli-run")))
    return cases, got, kept


@pytest.mark.parametrize("group", GROUPS)
def test_each_hostile_input_gets_one_clear_line_and_loses_nothing(outcomes, group):
    cases, got, kept = outcomes
    mine = [c for c in cases if c.group == group]
    assert mine, f"no case in group {group}"
    problems = []
    for case in mine:
        problems += problems_of(case, got[case.name], {p: kept[p] for p in case.keep})
    assert not problems, "\n".join(problems)
