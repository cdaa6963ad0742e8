"""`transformer-viewer train-sae` end to end on a tiny random model and a tiny text: the SAELens 6
folder it writes, read back with SAELens's formulas and the viewer's own reader; falling loss;
labels; Ctrl-C and --out."""

import csv
import os

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.cli import cli, error_line
from tests.helpers.models import TINY, save_tiny, tiny_gpt
from tests.helpers.sae_files import decode, encode, fvu, read_folder
from tests.helpers.tolerances import assert_float32_close
from tests.helpers.training import write_text
from transformer_viewer.model.decoder.hooks import run_with_cache
from transformer_viewer.model.sae.loading import load_sae
from transformer_viewer.model.tokenizers.tokenizer import Tokenizer
from transformer_viewer.model.training.sae_labels import TopActivations, feature_labels, token_string

HOOK = "blocks.1.hook_resid_post"
# Forty steps of 256 activations on a 32-wide layer: a second or two on one core.
SAE_FLAGS = ["--hook", HOOK, "--d-sae", "64", "--k", "4", "--steps", "40", "--batch-tokens", "256",
             "--context-size", "16", "--windows-per-forward", "8", "--eval-windows", "8", "--eval-every", "10",
             "--val-fraction", "0.2", "--warmup", "5", "--lr", "3e-3", "--device", "cpu", "--seed", "3"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sae-inputs")
    save_tiny(folder / "tiny.safetensors")
    return str(folder / "tiny.safetensors"), write_text(folder / "text.txt", n=200)


def train(capsys, inputs, out, *extra):
    checkpoint, text = inputs
    return cli(capsys, "train-sae", checkpoint, "--data", text, "--out", str(out), *SAE_FLAGS, *extra)


def validation_activations(folder) -> torch.Tensor:
    """The activations at HOOK of the validation windows the folder's labels came from."""
    windows = load_file(os.path.join(folder, "label_tokens.safetensors"))["tokens"].long()  # (n, 16)
    with torch.no_grad():
        _, cache = run_with_cache(tiny_gpt(), windows, HOOK)
    return cache[HOOK].reshape(-1, TINY.n_embd)  # (n * 16, C)


def test_writes_a_saelens_folder_that_reads_back(inputs, tmp_path, capsys):
    out = tmp_path / "sae"
    rc, stdout, err = train(capsys, inputs, out, "--labels", "3", "--label-top", "4")
    assert rc == 0, err
    assert f"saved {out}" in stdout and "FVU" in err
    cfg, w = read_folder(out)
    assert (cfg["d_in"], cfg["d_sae"], cfg["architecture"], cfg["k"]) == (32, 64, "topk", 4)
    meta = cfg["metadata"]
    assert (meta["hook_name"], meta["model_name"], meta["context_size"]) == (HOOK, "tiny.safetensors", 16)
    assert meta["sae_lens_version"].startswith("6.") and cfg["normalize_activations"] == "none"
    assert {n: tuple(t.shape) for n, t in w.items()} == {"W_enc": (32, 64), "b_enc": (64,), "W_dec": (64, 32),
                                                          "b_dec": (32,)}
    record = meta["training"]
    fvus = [h["val_fvu"] for h in record["history"]]
    assert [h["step"] for h in record["history"]] == [10, 20, 30, 40]
    assert fvus[-1] < fvus[0] and fvus[-1] < 1.0  # it learned, and beats the mean as a reconstruction
    # The folder's weights, read with SAELens's formulas on the validation activations, give the
    # FVU and L0 the record states (float32 sums in the trainer, float64 here).
    x = validation_activations(out)
    f = encode(cfg, w, x)
    assert fvu(x, decode(w, f)) == pytest.approx(record["final_fvu"], rel=1e-4)
    assert float((f != 0).sum(-1).double().mean()) == pytest.approx(record["final_l0"], abs=1e-6)
    assert not any(name.endswith(".part") for name in os.listdir(tmp_path))
    # The viewer's reader opens it for the model it was trained on, with no warning, and encodes
    # as the formulas do (sums of d_in = 32 products).
    loaded = load_sae(str(out), TINY, model_name="tiny.safetensors")
    c = loaded.config
    assert (c.architecture, c.d_in, c.d_sae, c.k, c.hook, c.context_size) == ("topk", 32, 64, 4, HOOK, 16)
    assert loaded.warnings == ()
    with torch.no_grad():
        assert_float32_close(loaded.module.encode(x), f, reduction=32, what="features")


def test_labels_are_the_top_activating_tokens(inputs, tmp_path, capsys):
    out = tmp_path / "labelled"
    assert train(capsys, inputs, out, "--labels", "3", "--label-top", "4")[0] == 0
    cfg, w = read_folder(out)
    f = encode(cfg, w, validation_activations(out))  # (N, d_sae)
    windows = load_file(os.path.join(out, "label_tokens.safetensors"))["tokens"].long().reshape(-1)
    values, rows = f.topk(4, dim=0)  # (4, d_sae): each feature's four highest activations
    tops = TopActivations(values.numpy(), torch.where(values > 0, windows[rows], -1).numpy())
    expected = feature_labels(tops, token_string(Tokenizer()), 3)
    with open(out / "labels.csv", newline="", encoding="utf-8") as fh:
        rows_read = list(csv.reader(fh))
    assert rows_read[0] == ["id", "label"]
    assert [(int(i), label) for i, label in rows_read[1:]] == expected and len(expected) == 3


def test_standard_architecture(inputs, tmp_path, capsys):
    out = tmp_path / "standard"
    rc, _, err = train(capsys, inputs, out, "--architecture", "standard", "--l1", "0.5")
    assert rc == 0, err
    cfg, w = read_folder(out)
    assert cfg["architecture"] == "standard" and "k" not in cfg
    history = cfg["metadata"]["training"]["history"]
    assert history[-1]["val_fvu"] < history[0]["val_fvu"]


def test_same_seed_same_sae(inputs, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert train(capsys, inputs, a)[0] == 0 and train(capsys, inputs, b)[0] == 0
    (_, wa), (_, wb) = read_folder(a), read_folder(b)
    assert all(torch.equal(wa[n], wb[n]) for n in wa)


def test_float16_weights_are_read_as_float32(inputs, tmp_path, capsys):
    out = tmp_path / "half"
    assert train(capsys, inputs, out, "--save-dtype", "float16")[0] == 0
    stored = load_file(os.path.join(out, "sae_weights.safetensors"))
    cfg, _ = read_folder(out)
    assert all(t.dtype == torch.float16 for t in stored.values()) and cfg["dtype"] == "float32"


def test_ctrl_c_leaves_no_folder(inputs, tmp_path, capsys, monkeypatch):
    from transformer_viewer.viewer.cli import train_sae

    def interrupt_at_3(self, info):
        if info["step"] == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(train_sae.Progress, "on_step", interrupt_at_3)
    rc, _, err = train(capsys, inputs, tmp_path / "cancelled")
    assert rc == 130 and "nothing was written" in err and "Traceback" not in err
    assert os.listdir(tmp_path) == []


def test_ctrl_c_while_writing_keeps_the_old_folder(inputs, tmp_path, capsys, monkeypatch):
    from transformer_viewer.model.training import sae_folder

    out = tmp_path / "kept"
    assert train(capsys, inputs, out)[0] == 0
    before = (out / "sae_weights.safetensors").read_bytes()
    real = sae_folder.write_bytes

    def interrupt_at_second_file(path, data):
        if path.endswith("cfg.json"):
            raise KeyboardInterrupt
        return real(path, data)

    monkeypatch.setattr(sae_folder, "write_bytes", interrupt_at_second_file)
    assert train(capsys, inputs, out, "--overwrite", "--seed", "4")[0] == 130
    assert (out / "sae_weights.safetensors").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["kept"]


@pytest.mark.parametrize("extra, message", [
    (["--hook", "blocks.7.hook_resid_post"], "no such hook point"),
    (["--k", "65"], "--k must be between 1 and --d-sae"),
    (["--context-size", "65"], "--context-size must be between"),
    (["--eval-windows", "0"], "--eval-windows must be at least 1"),
])
def test_bad_arguments_are_one_line(inputs, tmp_path, capsys, extra, message):
    line = error_line(*train(capsys, inputs, tmp_path / "x", *extra))
    assert message in line and not os.path.exists(tmp_path / "x")


def test_existing_out_needs_overwrite_and_an_sae_folder(inputs, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert "already exists" in error_line(*train(capsys, inputs, out))
    assert "not an SAE's (notes.txt)" in error_line(*train(capsys, inputs, out, "--overwrite"))
    assert (out / "notes.txt").read_text() == "mine"


def test_an_sae_on_the_heads_outputs(inputs, tmp_path, capsys):
    """attn.hook_z (B, T, nh, hs) is read as nh * hs per token, as SAELens's hook_z reshaping does."""
    out = tmp_path / "z"
    hook = "blocks.0.attn.hook_z"
    assert train(capsys, inputs, out, "--hook", hook)[0] == 0
    cfg, w = read_folder(out)
    assert cfg["reshape_activations"] == "hook_z" and cfg["d_in"] == TINY.n_embd and w["W_enc"].shape == (32, 64)
    assert load_sae(str(out), TINY, model_name="tiny.safetensors").config.hook == hook


def test_a_model_with_its_own_tokenizer_and_bos(tmp_path, capsys):
    """A folder whose tokenizer starts each text with <s>: the text is tokenized by it, every
    window starts with the BOS, and the BOS positions are left out of the activations."""
    from tests.helpers.tokenizers import own_tokenizer_folder

    folder = own_tokenizer_folder(str(tmp_path / "model"))
    text = write_text(tmp_path / "text.txt", n=200)
    out = tmp_path / "sae"
    rc, _, err = cli(capsys, "train-sae", folder, "--data", text, "--out", str(out), *SAE_FLAGS, "--labels", "2",
                     "--label-top", "3")
    assert rc == 0, err
    cfg, _ = read_folder(out)
    meta = cfg["metadata"]
    assert meta["prepend_bos"] is True and meta["training"]["bos_positions_excluded"] is True
    windows = load_file(os.path.join(out, "label_tokens.safetensors"))["tokens"]
    assert windows.shape[1] == 15  # 16-token windows, one of them the BOS
    from transformer_viewer.model.tokenizers.hf_tokenizer import HFTokenizer

    tok = HFTokenizer(folder)
    with open(text, encoding="utf-8") as f:
        ids = set(tok.encode(f.read(), add_special_tokens=False))
    assert set(windows.flatten().tolist()) <= ids and tok.bos_id not in set(windows.flatten().tolist())
