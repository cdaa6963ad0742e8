"""`--mask` and `--ablation` become one Intervention, made (and so checked) once per command;
--ablation's choices are the model's ablation kinds."""

from __future__ import annotations

import pytest

from tests.helpers.cli import cli
from tests.helpers.models import ANALYSIS_PROMPT as PROMPT
from tests.helpers.models import scaled_init_loaded
from transformer_viewer.model.capture import interventions
from transformer_viewer.model.capture.interventions import ABLATIONS, Intervention
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.viewer.cli.main import main


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("intervention") / "tiny.safetensors"
    save_checkpoint(scaled_init_loaded().model, str(path))
    return str(path)


@pytest.fixture
def masks_made(monkeypatch):
    """The masks Intervention.make was given (each call the one check); None (a clean
    default, such as a window state's reset) is not counted."""
    made = []
    original = Intervention.make.__func__

    def counted(cls, config, mask=None, *args, **kwargs):
        if mask is not None:
            made.append(mask)
        return original(cls, config, mask, *args, **kwargs)
    monkeypatch.setattr(interventions.Intervention, "make", classmethod(counted))
    return made


@pytest.mark.parametrize("command", [
    ["predict", "--prompt", PROMPT, "--json"],
    ["scan", "--prompt", PROMPT, "--json", "--no-progress"],
    ["attribute", "--prompt", PROMPT, "--json"],
    ["routes", "--prompt", PROMPT, "--json"],
    ["rollout", "--prompt", PROMPT, "--query", "-1"],
])
def test_each_command_checks_its_mask_and_ablation_once(ckpt, capsys, masks_made, command):
    rc, out, err = cli(capsys, command[0], ckpt, *command[1:], "--mask", "0.1", "--ablation", "mean")
    assert rc == 0, err
    assert len(masks_made) == 1 and masks_made[0][0, 1] and masks_made[0].sum() == 1


def test_export_checks_its_mask_and_ablation_once(ckpt, capsys, masks_made, tmp_path, qapp):
    rc, out, err = cli(capsys, "export", "--checkpoint", ckpt, "--prompt", PROMPT, "--layer", "1", "--head", "2",
                       "--out", str(tmp_path / "a.npy"), "--mask", "1.0", "--ablation", "mean")
    assert rc == 0, err
    assert len(masks_made) == 1 and masks_made[0][1, 0] and masks_made[0].sum() == 1


@pytest.mark.parametrize("command", ["predict", "scan", "attribute", "routes", "rollout", "export"])
def test_ablation_choices_are_the_model_s_kinds(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--prompt", PROMPT, "--ablation", "half"])
    assert f"invalid choice: 'half' (choose from {', '.join(map(repr, ABLATIONS))})" in capsys.readouterr().err
