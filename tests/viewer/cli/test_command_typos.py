"""A first argument that is no checkpoint but close to a subcommand's name is a typo: one line
suggesting the command, exit 2, before any window or model."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import cli, error_line
from tests.helpers.hf_hub import cache_entry
from transformer_viewer.model.checkpoints import checkpoint as checkpoint_module
from transformer_viewer.viewer.cli import gui
from transformer_viewer.viewer.cli.main import mistyped_command


@pytest.fixture
def nothing_runs(monkeypatch):
    """A typo must stop before a model loads or the window starts."""
    def refuse(*_a, **_kw):
        raise AssertionError("a typo reached a model or the window")
    monkeypatch.setattr(checkpoint_module, "load_checkpoint", refuse)
    monkeypatch.setattr(gui, "run", refuse)


@pytest.mark.parametrize("argv, meant", [
    (["inof"], "info"),
    (["Info"], "info"),
    (["exprot", "--prompt", "x", "--out", "x.png"], "export"),
    (["predcit", "--prompt", "x"], "predict"),
    (["hed"], "heads"),
    (["scna", "--prompt", "x"], "scan"),
])
def test_a_typo_gets_did_you_mean(capsys, nothing_runs, argv, meant, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = error_line(*cli(capsys, *argv))
    assert line.endswith(f"did you mean {meant}?") and repr(argv[0]) in line
    assert "--out" not in line  # the command is named first, not its arguments


def test_a_file_a_folder_or_a_cached_model_is_a_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert mistyped_command("inof") == "info"
    (tmp_path / "inof").write_bytes(b"")  # a file of that name is the user's checkpoint
    assert mistyped_command("inof") is None
    (tmp_path / "heds").mkdir()
    assert mistyped_command("heds") is None
    assert mistyped_command("scna") == "scan"
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (folder / "model.safetensors").write_bytes(b"")
    hub = tmp_path / "hub"
    cache_entry(hub, "scna", str(folder))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert mistyped_command("scna") is None  # a model in the local cache by that name


@pytest.mark.parametrize("word", ["gpt2", "model.safetensors", "--prompt", "Qwen/Qwen2.5-0.5B", "xyzzy"])
def test_other_words_are_left_to_the_window(word, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert mistyped_command(word) is None
