"""Hostile and broken checkpoints: every file of the generated corpus is one CheckpointError line
from the loader, exit code 2 with that line (and no traceback) from the CLI, and an error dialog
in the app with the previous model still loaded. Code-carrying pickles never run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.hardening.corpus import EXTENSIONS, GOOD
from tests.helpers.cli import cli, error_line
from tests.helpers.failing_open import refuse_reads_of
from tests.helpers.hardening import new_window, one_line, wait_idle
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.viewer.cli.main import main


def load_error(path: str) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, device="cpu")
    return str(info.value)




def test_the_corpus_covers_every_kind_of_damage(corpus):
    bad, _marker = corpus
    assert len(bad) >= 40
    groups = {b.group for b in bad}
    assert groups >= {"empty", "random", "truncated", "contents", "config", "code", "layout", "hf", "folder"}
    names = {b.name for b in bad}
    for ext in EXTENSIONS:
        assert f"empty{ext}" in names and f"random{ext}" in names
    assert sum(b.name.startswith("trunc_st_") for b in bad) >= 3
    assert sum(b.name.startswith(("trunc_zip_", "trunc_legacy_")) for b in bad) >= 3
    assert len(names) == len(bad)


def test_the_undamaged_originals_load(corpus):
    """Each damaged file is a copy of one of these with one defect: they themselves must load."""
    _bad, marker = corpus
    root = os.path.dirname(marker)
    for name in GOOD:
        loaded = load_checkpoint(os.path.join(root, name), device="cpu")
        assert loaded.config.n_embd == 16, name


def test_every_bad_file_is_one_checkpoint_error_line(corpus):
    bad, marker = corpus
    problems = []
    for b in bad:
        try:
            load_checkpoint(b.path, device="cpu")
        except CheckpointError as e:
            message = str(e)
            if not one_line(message) or b.expect not in message.lower():
                problems.append(f"{b.name}: {message!r} (expected {b.expect!r})")
        except Exception as e:  # noqa: BLE001 - exactly what this test hunts for
            problems.append(f"{b.name}: {type(e).__name__} escaped: {e}")
        else:
            problems.append(f"{b.name}: loaded without complaint")
    assert not problems, "\n".join(problems)
    assert not os.path.exists(marker), "a pickle payload ran while loading"


def test_code_carrying_pickles_are_refused_without_running(corpus):
    bad, marker = corpus
    evil = [b for b in bad if b.name.startswith("evil_")]
    assert len(evil) >= 4
    for b in evil:
        message = load_error(b.path)
        assert "needs code to load" in message or "unknown checkpoint format" in message, message
        assert not os.path.exists(marker), f"{b.name}: the payload created {marker}"


def test_a_file_without_read_permission(tmp_path, monkeypatch, tiny_ckpt, capsys):
    path = str(tmp_path / "locked.safetensors")
    with open(tiny_ckpt, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    try:
        refuse_reads_of(monkeypatch, path)
        message = load_error(path)
        assert one_line(message) and "permission denied" in message
        line = error_line(*cli(capsys, "info", path))
        assert line == f"error: {message}"
        line = error_line(*cli(capsys, "predict", "--checkpoint", path, "--prompt", "hi"))
        assert line == f"error: {message}"
    finally:
        os.chmod(path, 0o644)


def test_a_folder_and_a_config_without_read_permission(tmp_path, monkeypatch):
    folder = tmp_path / "locked"
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    real_listdir = os.listdir

    def refusing_listdir(p="."):
        if os.path.abspath(os.fsdecode(p)) == str(folder):
            raise PermissionError(13, "Permission denied", str(p))
        return real_listdir(p)

    monkeypatch.setattr(os, "listdir", refusing_listdir)  # root lists anything; simulate a user
    message = load_error(str(folder))
    assert one_line(message) and "permission denied" in message
    monkeypatch.undo()
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "gpt2"}')
    refuse_reads_of(monkeypatch, str(hf / "config.json"))
    message = load_error(str(hf))
    assert one_line(message) and "permission denied" in message
    os.chmod(hf / "config.json", 0o644)


def test_cli_info_and_predict_give_exit_2_and_the_loaders_line(corpus, capsys):
    bad, marker = corpus
    problems = []
    for b in bad:
        expected = "error: " + load_error(b.path)
        for argv in (["info", b.path], ["predict", "--checkpoint", b.path, "--prompt", "hello"]):
            rc = main(argv)
            out, err = capsys.readouterr()
            lines = err.strip().splitlines()
            if rc != 2 or out or "Traceback" in err or lines != [expected]:
                problems.append(f"{b.name} {argv[0]}: rc={rc} out={out[:80]!r} err={err[:300]!r}")
    assert not problems, "\n".join(problems)
    assert not os.path.exists(marker)


SUBPROCESS_CASES = [("info", "evil_zip"), ("info", "trunc_zip_200"), ("predict", "random.safetensors"),
                    ("predict", "hf_bert")]


def test_the_real_command_line_prints_one_line_without_traceback(corpus):
    """A handful through the console entry point, as a user runs it (all started at once)."""
    bad, marker = corpus
    by_name = {b.name: b for b in bad}
    env = dict(os.environ, PYTHONPATH=os.getcwd(), OMP_NUM_THREADS="1")
    procs = []
    for command, name in SUBPROCESS_CASES:
        path = by_name[name].path
        argv = [command, path] if command == "info" else [command, "--checkpoint", path, "--prompt", "hi"]
        procs.append((name, subprocess.Popen([sys.executable, "-m", "transformer_viewer.viewer.cli.main", *argv],
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)))
    for name, proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 2, (name, err)
        assert out == "" and "Traceback" not in err, (name, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (name, err)
        assert by_name[name].expect in lines[0].lower()
    assert not os.path.exists(marker)


def test_the_app_shows_each_error_in_a_dialog_and_keeps_the_model(qtbot, tmp_path, tiny_ckpt, corpus, dialogs,
                                                                  monkeypatch):
    bad, marker = corpus
    window = new_window(qtbot, tmp_path, tiny_ckpt)
    st = window.state
    before = st.model_info
    trace_before = st.trace
    locked = str(tmp_path / "locked.safetensors")
    with open(tiny_ckpt, "rb") as src, open(locked, "wb") as dst:
        dst.write(src.read())
    cases = [(b.name, b.path) for b in bad]
    problems = []
    for name, path in cases:
        expected = load_error(path)
        n = len(dialogs.shown)
        window.load(path)
        wait_idle(qtbot, window, lambda n=n: len(dialogs.shown) > n)
        if dialogs.shown[n:] != [expected]:
            problems.append(f"{name}: dialogs {dialogs.shown[n:]!r}, expected {expected!r}")
        if st.model_info != before or st.trace is not trace_before:
            problems.append(f"{name}: the loaded model or its trace changed")
    assert not problems, "\n".join(problems)
    # The unreadable file, through the worker thread too.
    refuse_reads_of(monkeypatch, locked)
    n = len(dialogs.shown)
    window.load(locked)
    wait_idle(qtbot, window, lambda: len(dialogs.shown) > n)
    assert "permission denied" in dialogs.last and st.model_info == before
    os.chmod(locked, 0o644)
    monkeypatch.undo()
    assert window.status.model_label.text().startswith("tiny")
    assert not os.path.exists(marker)
    # Still the same model, and it still answers.
    window.run_prompt("A fresh prompt after all that")
    wait_idle(qtbot, window, lambda: st.trace is not None and st.trace.text == "A fresh prompt after all that")
    assert st.model_info == before
    window.close()
