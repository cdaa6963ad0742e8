"""`transformer-viewer train` end to end on a tiny config: plain and .xz text, a few steps."""

import hashlib
import lzma
import os

import pytest

from tests.helpers.training import TINY_FLAGS, write_text
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer
from transformer_viewer.viewer.cli.main import main


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-data")
    plain = write_text(folder / "plain.txt")
    xz = folder / "packed.txt.xz"
    with open(plain, "rb") as f:
        xz.write_bytes(lzma.compress(f.read()))
    return plain, str(xz)


@pytest.mark.parametrize("which", [0, 1], ids=["plain", "xz"])
def test_train_writes_a_checkpoint_with_its_record(texts, tmp_path, capsys, which):
    data = texts[which]
    out = tmp_path / "m.safetensors"
    assert main(["train", "--data", data, "--out", str(out), *TINY_FLAGS]) == 0
    captured = capsys.readouterr()
    assert "saved" in captured.out and "unigram baseline" in captured.out
    assert "training tokens" in captured.err and "step 2: train" in captured.err
    loaded = load_checkpoint(str(out))
    assert (loaded.config.n_layer, loaded.config.n_head, loaded.config.n_embd) == (1, 2, 16)
    t = loaded.training
    with open(data, "rb") as f:
        assert t["data"][0]["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert t["steps"] == 4 and [h["step"] for h in t["history"]] == [2, 4] and t["seed"] == 5
    assert t["command"][:4] == ["transformer-viewer", "train", "--data", data]
    assert "--steps" in t["command"]


def test_plain_and_xz_give_the_same_curve(texts, tmp_path, capsys):
    outs = [tmp_path / "a.safetensors", tmp_path / "b.safetensors"]
    for data, out in zip(texts, outs, strict=True):
        assert main(["train", "--data", data, "--out", str(out), *TINY_FLAGS]) == 0
    capsys.readouterr()
    a, b = (load_checkpoint(str(o)).training["history"] for o in outs)
    assert a == b


def test_resume_continues(texts, tmp_path, capsys):
    out = tmp_path / "r.safetensors"
    assert main(["train", "--data", texts[0], "--out", str(out), *TINY_FLAGS, "--keep-optimizer"]) == 0
    assert os.path.exists(str(out) + ".optim")
    more = [f if f != "4" else "6" for f in TINY_FLAGS]  # --steps 6
    assert main(["train", "--data", texts[0], "--out", str(out), *more, "--resume"]) == 0
    assert "resuming " + str(out) + " at step 4" in capsys.readouterr().err
    t = load_checkpoint(str(out)).training
    assert t["steps"] == 6 and [h["step"] for h in t["history"]] == [2, 4, 6]
    assert t["resumed"][0]["from_step"] == 4 and t["resumed"][0]["optimizer_restored"] is True
    assert not os.path.exists(str(out) + ".optim")  # removed once the run finished


def test_finished_run_leaves_no_optimizer_file_and_a_clean_log(texts, tmp_path, capsys):
    """stderr here is not a terminal (a log file): no progress bar, each evaluation line once."""
    out = tmp_path / "m.safetensors"
    assert main(["train", "--data", texts[0], "--out", str(out), *TINY_FLAGS]) == 0
    err = capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]
    assert "\r" not in err and "step/s" not in err and "it/s" not in err
    assert err.count("step 2: train") == 1 and err.count("step 4: train") == 1


def test_every_option_says_what_it_does_and_its_default():
    from transformer_viewer.viewer.cli.main import build_parser

    parser = build_parser("train")
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert action.help, action.option_strings
        assert action.required or "default" in action.help, action.option_strings
    assert ".optim" in parser.format_help() and "--keep-optimizer" in parser.format_help()


def test_output_folder_and_resume_are_checked_before_training(texts, tmp_path, capsys):
    missing = tmp_path / "missing" / "x.safetensors"
    assert main(["train", "--data", texts[0], "--out", str(missing), *TINY_FLAGS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "training tokens" not in err
    out = tmp_path / "none.safetensors"
    assert main(["train", "--data", texts[0], "--out", str(out), *TINY_FLAGS, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {out}: no checkpoint to resume from; drop --resume to start a new run\n"


def test_binary_data_is_not_text(tmp_path, capsys):
    junk = tmp_path / "random.bin"
    junk.write_bytes(bytes(range(256)) * 64)
    assert main(["train", "--data", str(junk), "--out", str(tmp_path / "m.safetensors"), *TINY_FLAGS]) == 2
    assert "not a text file" in capsys.readouterr().err


def test_sinusoidal_positions(texts, tmp_path, capsys):
    out = tmp_path / "s.safetensors"
    assert main(["train", "--data", texts[0], "--out", str(out), *TINY_FLAGS, "--positional", "sinusoidal"]) == 0
    capsys.readouterr()
    loaded = load_checkpoint(str(out))
    assert loaded.config.positional == "sinusoidal" and loaded.model.wpe is None


def test_init_flags_reach_the_model_and_the_record(texts, tmp_path, capsys):
    """--embed-init-std and --pos-init-std set the starting weights (seen after one tiny step,
    lr 1e-6, so training barely moves them) and are kept in the training record."""
    out = tmp_path / "i.safetensors"
    flags = [*TINY_FLAGS, "--steps", "1", "--lr", "1e-6"]  # the last --steps wins
    assert main(["train", "--data", texts[0], "--out", str(out), *flags, "--embed-init-std", "0.5",
                 "--pos-init", "sinusoidal", "--pos-init-std", "0.3"]) == 0
    capsys.readouterr()
    loaded = load_checkpoint(str(out))
    wte, wpe = loaded.model.wte.weight.detach(), loaded.model.wpe.weight.detach()
    with open(texts[0]) as f:
        seen = sorted(set(Tokenizer().encode(f.read())))  # the other rows start at zero
    assert abs(float(wte[seen].std()) - 0.5) < 0.1
    assert abs(float(wpe.std()) - 0.3) < 0.01
    tc = loaded.training["train_config"]
    assert tc["embed_init_std"] == 0.5 and tc["pos_init_std"] == 0.3 and tc["pos_init"] == "sinusoidal"


def test_ctrl_c_exits_cleanly_with_the_model_saved(texts, tmp_path, capsys, monkeypatch):
    from transformer_viewer.viewer.cli import train as cli_train

    out = tmp_path / "c.safetensors"
    real = cli_train.Progress.on_step

    def interrupt_at_3(self, info):
        real(self, info)
        if info["step"] == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_train.Progress, "on_step", interrupt_at_3)
    assert main(["train", "--data", texts[0], "--out", str(out), *TINY_FLAGS]) == 130
    err = capsys.readouterr().err
    assert "interrupted at step 3" in err and "--resume" in err and "Traceback" not in err
    t = load_checkpoint(str(out)).training
    assert t["steps"] == 3 and t["interrupted"] is True


@pytest.mark.parametrize("extra, message", [
    (["--steps", "0"], "--steps"),
    (["--val-fraction", "1.5"], "--val-fraction"),
    (["--embed-init-std", "0"], "--embed-init-std"),
    (["--pos-init-std", "-1"], "--pos-init-std"),
    (["--n-embd", "15"], "divisible"),
    (["--block-size", "4096"], "block_size"),
])
def test_bad_flags_are_one_line_errors(texts, tmp_path, capsys, extra, message):
    out = tmp_path / "e.safetensors"
    assert main(["train", "--data", texts[0], "--out", str(out), *TINY_FLAGS, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and message in err[-1]
    assert not out.exists()


def test_missing_and_broken_data(tmp_path, capsys):
    out = str(tmp_path / "e.safetensors")
    assert main(["train", "--data", str(tmp_path / "none.txt"), "--out", out, *TINY_FLAGS]) == 2
    assert "not found" in capsys.readouterr().err
    bad = tmp_path / "bad.txt.xz"
    bad.write_bytes(b"not xz at all")
    assert main(["train", "--data", str(bad), "--out", out, *TINY_FLAGS]) == 2
    assert "not a valid .xz" in capsys.readouterr().err
    resume = main(["train", "--data", str(tmp_path / "none.txt"), "--out", out, *TINY_FLAGS, "--resume"])
    assert resume == 2


def test_an_existing_out_is_refused_without_resume_and_replaced_with_overwrite(texts, tmp_path, capsys):
    out = tmp_path / "theirs.safetensors"
    out.write_bytes(b"a checkpoint the user had")
    assert main(["train", "--data", texts[0], "--out", str(out), *TINY_FLAGS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err and "--overwrite" in err and "training tokens" not in err
    assert out.read_bytes() == b"a checkpoint the user had"
    assert main(["train", "--data", texts[0], "--out", str(out), *TINY_FLAGS, "--overwrite"]) == 0
    assert load_checkpoint(str(out)).training["steps"] == 4
