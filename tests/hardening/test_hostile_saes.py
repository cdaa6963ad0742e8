"""Hostile SAE files (corpus_saes.py): each is one ModelError line from `load_sae` and the same
line, exit 2, from `features --sae`; the ones that promise huge widths are refused before
anything is allocated (a subprocess loading all of them stays small)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.hardening import corpus_saes
from tests.helpers.hardening import TINY, one_line
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sae.loading import load_sae
from transformer_viewer.viewer.cli.main import main


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return corpus_saes.build(str(tmp_path_factory.mktemp("hostile_saes")))


def test_the_corpus_has_every_class(hostile):
    assert len({h.name for h in hostile}) == len(hostile) >= 40
    assert {h.group for h in hostile} == set(corpus_saes.GROUPS)


def test_each_file_is_one_line(hostile):
    wrong = []
    for h in hostile:
        try:
            load_sae(h.spec, TINY)
            wrong.append(f"{h.name}: loaded")
        except ModelError as e:
            if not (one_line(str(e)) and h.expect in str(e)):
                wrong.append(f"{h.name}: {e}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("group", corpus_saes.GROUPS)
def test_the_command_line_says_the_same_line(hostile, tiny_ckpt, capsys, group):
    for h in (h for h in hostile if h.group == group):
        assert main(["features", tiny_ckpt, "--sae", h.spec, "--prompt", "a b c"]) == 2, h.name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and h.expect in err[0], (h.name, err)


def test_huge_widths_are_refused_before_anything_is_allocated(hostile):
    specs = [h.spec for h in hostile if h.group == "size"]
    code = """
import json, resource, sys
from tests.helpers.hardening import TINY
from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.sae.loading import load_sae
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for spec in json.loads(sys.argv[1]):
    try:
        load_sae(spec, TINY)
    except ModelError:
        pass
    else:
        raise SystemExit("loaded " + spec)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
    done = subprocess.run([sys.executable, "-c", code, json.dumps(specs)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    grown_kb = int(done.stdout.strip())
    assert grown_kb < 200_000, f"loading the refused files grew the process by {grown_kb / 1024:.0f} MB"
