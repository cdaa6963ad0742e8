"""Time and peak memory of `info` and `predict` on every file of the hostile corpus
(tests/hardening/corpus_hostile.py).

    python bench/hostile_files.py [--only GROUP]

Each group of the corpus runs in its own fresh process; inside it every file goes through
`info` and `predict` in turn, timed one by one (the process's start-up, importing torch, is
not the file's doing and is left out). The peak resident memory shown after each run is the
process's peak so far, so a group's last row bounds every file of that group. The goal: every
file answered within 10 s and 1 GB, with exit code 2 (0 for the good ones).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CHILD = """
import contextlib, io, json, resource, sys, time
from transformer_viewer.viewer.cli.main import main
import transformer_viewer.viewer.cli.info, transformer_viewer.viewer.cli.predict  # noqa: the start-up, untimed
import transformer_viewer.model.capture.session, transformer_viewer.model.checkpoints.formats.detect  # noqa
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer
Tokenizer()
print(json.dumps({"name": "(start-up)", "command": "-", "s": 0.0, "rc": 0, "want": 0, "traceback": False,
                  "mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
for name, path, want in json.load(open(sys.argv[1])):
    for command in ("info", "predict"):
        argv = ["info", path] if command == "info" else ["predict", "--checkpoint", path, "--prompt", "a b c"]
        err = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(argv)
        s = time.perf_counter() - t0
        mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"name": name, "command": command, "s": s, "mib": mib, "rc": rc, "want": want,
                          "traceback": "Traceback" in err.getvalue()}), flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="one group of the corpus")
    args = parser.parse_args()
    from tests.hardening.corpus_hostile import GROUPS, build

    root = tempfile.mkdtemp(prefix="hostile-")
    entries = build(root)
    worst_s = worst_mib = 0.0
    bad = []
    print(f"{'group':<8} {'file':<32} {'command':<8} {'seconds':>8} {'peak MiB':>9} {'rc':>3}", flush=True)
    for group in GROUPS if args.only is None else (args.only,):
        listing = os.path.join(root, f"{group}.json")
        with open(listing, "w") as f:
            json.dump([(b.name, b.path, 0 if b.expect is None else 2) for b in entries if b.group == group], f)
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
        done = subprocess.run([sys.executable, "-c", CHILD, listing], capture_output=True, text=True, env=env)
        if done.returncode:
            bad.append(f"{group}: the measuring process failed: {done.stderr[-500:]}")
        for line in done.stdout.splitlines():
            r = json.loads(line)
            print(f"{group:<8} {r['name']:<32} {r['command']:<8} {r['s']:8.2f} {r['mib']:9.0f} {r['rc']:3d}", flush=True)
            worst_s, worst_mib = max(worst_s, r["s"]), max(worst_mib, r["mib"])
            if r["traceback"] or r["rc"] != r["want"] or r["s"] > 10 or r["mib"] > 1024:
                bad.append(f"{r['name']} {r['command']}: {r}")
    print(f"{len(entries)} files: slowest run {worst_s:.2f} s, largest peak {worst_mib:.0f} MiB")
    for line in bad:
        print("FAILED", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
