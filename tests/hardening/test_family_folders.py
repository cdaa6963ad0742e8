"""Hostile and unsupported Hugging Face family folders: each is refused with one line that
names the problem, from the loader and from the command line, before any weight is used."""

from __future__ import annotations

import pytest

from tests.hardening.family_folders import ALL, make
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.viewer.cli.main import main


@pytest.mark.parametrize("name", ALL)
def test_each_folder_is_one_checkpoint_error_line(tmp_path, name):
    folder, expect = make(str(tmp_path), name)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(folder)
    message = str(e.value)
    assert "\n" not in message and expect.lower() in message.lower(), message


@pytest.mark.parametrize("name", ["mixtral", "layers_huge", "missing_tensor", "shard_outside"])
def test_the_command_line_says_it_in_one_line(tmp_path, capsys, name):
    folder, expect = make(str(tmp_path), name)
    capsys.readouterr()  # save_pretrained's progress bar
    assert main(["info", folder]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and expect.lower() in err[0].lower()
