"""End to end: a GPT-2-architecture Hugging Face folder with a small vocabulary and its own trained
tokenizer.json loads with that tokenizer, the session runs a prompt with it (BOS first), and the
CLI prints its tokens."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.helpers import tokenizers as tc
from tests.helpers.tokenizers import own_tokenizer_folder
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint
from transformer_viewer.model.tokenizers.hf_tokenizer import HFTokenizer
from transformer_viewer.viewer.cli.main import main

PROMPT = "Hello world, the capital of France"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return own_tokenizer_folder(str(tmp_path_factory.mktemp("own") / "model"))


def test_loads_with_its_own_tokenizer(folder):
    loaded = load_checkpoint(folder)
    assert isinstance(loaded.tokenizer, HFTokenizer) and loaded.tokenizer.spec.endswith("model")
    ref = tc.reference(folder)
    s = Session(loaded)
    s.set_prompt(PROMPT)
    trace = s.run()
    assert trace.token_ids.tolist() == ref(PROMPT)["input_ids"]
    assert trace.labels == loaded.tokenizer.tokenize(PROMPT).labels
    assert trace.labels[0] == "<s>" and trace.special[0] and not any(trace.special[1:])
    assert trace.labels[1] == "·Hel" or trace.labels[1].startswith("·")
    assert "".join(trace.text[a:b] for a, b in trace.spans) == PROMPT
    assert s.n_vocab == loaded.config.vocab_size == len(ref)


def test_the_ids_reach_the_model_they_were_made_for(folder):
    """Our logits on the tokenizer's ids equal transformers' model on the reference tokenizer's ids."""
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    ids = torch.tensor([tc.reference(folder)(PROMPT)["input_ids"]])
    with torch.no_grad():
        want = hf(ids).logits[0, -1].numpy()
    s = Session(load_checkpoint(folder))
    s.set_prompt(PROMPT)
    got = s.run(top_k=5).next
    np.testing.assert_allclose(np.log(got.probs), torch.log_softmax(torch.from_numpy(want), -1).numpy(), atol=1e-4)


def test_cli_predict_prints_its_tokens(folder, capsys):
    assert main(["predict", "--checkpoint", folder, "--prompt", PROMPT, "--top-k", "3", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    labels = load_checkpoint(folder).tokenizer.tokenize(PROMPT).labels
    assert "0:<s> 1:" + labels[1] in out
    assert " ".join(f"{i}:{lab}" for i, lab in enumerate(labels)) in out
    assert main(["predict", "--checkpoint", folder, "--prompt", PROMPT, "--json", "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tokens"][0] == {"id": 1, "text": "<s>", "special": True}
    assert "".join(t["text"] for t in result["tokens"][1:]) == " " + PROMPT  # SentencePiece's leading space


def test_cli_info_names_the_tokenizer(folder, capsys):
    assert main(["info", folder]) == 0
    out = capsys.readouterr().out
    assert "tokenizer   tokenizer.json (BPE with byte fallback" in out and "'<s>'" in out


def test_scan_target_in_the_models_tokenizer(folder, capsys):
    rc = main(["scan", "--checkpoint", folder, "--prompt", PROMPT, "--target", " the", "--json", "--no-progress",
               "--device", "cpu"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    tok = load_checkpoint(folder).tokenizer
    assert result["target"]["id"] == tok.encode(" the", add_special_tokens=False)[0]


def test_byte_level_model_without_bos(tmp_path):
    folder = own_tokenizer_folder(str(tmp_path / "bl"), kind="byte_level")
    s = Session(load_checkpoint(folder))
    s.set_prompt("a\nb")
    assert s.tokens.labels == ("a", "⏎", "b") and not any(s.tokens.special)


def test_from_the_cache_by_name(tmp_path, monkeypatch):
    """A cached snapshot whose files are links into blobs/ (as huggingface_hub stores them)."""
    import os
    import shutil

    built = own_tokenizer_folder(str(tmp_path / "built"), seed=3)
    repo = tmp_path / "hub" / "models--org--own-tok"
    snap = repo / "snapshots" / "0123abcd"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    for name in os.listdir(built):
        blob = repo / "blobs" / ("blob-" + name)
        shutil.copy(os.path.join(built, name), blob)
        os.symlink(os.path.relpath(blob, snap), snap / name)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    loaded = load_checkpoint("org/own-tok")
    assert loaded.name == "org/own-tok" and isinstance(loaded.tokenizer, HFTokenizer)
    s = Session(loaded)
    s.set_prompt(PROMPT)
    assert list(s.tokens.ids) == tc.reference(built)(PROMPT)["input_ids"]


def test_head_detection_tokenizes_with_the_model_and_starts_with_its_bos(folder, monkeypatch):
    from transformer_viewer.model.analysis import heads

    loaded = load_checkpoint(folder)
    seen = []
    real = heads._patterns
    monkeypatch.setattr(heads, "_patterns", lambda model, ids: seen.append(ids[0].tolist()) or real(model, ids))
    heads.detect_heads(Session(loaded), texts=["Hello world, the capital of France"], induction_length=8, induction_batch=1)
    assert seen[0] == loaded.tokenizer.encode("Hello world, the capital of France")[:64]
    assert seen[0][0] == seen[1][0] == loaded.tokenizer.bos_id == 1  # natural text and random sequences


def _family_folder(folder: str, family: str, tokenizer_kind: str | None) -> tuple[str, int]:
    """A tiny random model of `family` sized to a tokenizer trained into the same folder (with
    None: sized like the Metaspace one, which is then left out of the folder), and that size."""
    import transformers

    from tests.helpers.hf_family_models import FAMILIES

    tokenizer_folder = folder if tokenizer_kind else folder + "-tokenizer"
    getattr(tc, tokenizer_kind or "metaspace")(tokenizer_folder)
    n_vocab = HFTokenizer(tokenizer_folder).n_vocab
    config_cls, model_cls, kwargs, _ = FAMILIES[family]
    torch.manual_seed(4)
    config = getattr(transformers, config_cls)(**dict(kwargs, vocab_size=n_vocab))
    getattr(transformers, model_cls)(config).save_pretrained(folder)
    return folder, n_vocab


@pytest.mark.parametrize("family,kind", [("llama", "metaspace"), ("gemma", "gemma_style"), ("qwen2", "byte_level")])
def test_a_family_model_runs_with_its_tokenizer(tmp_path, family, kind):
    folder, _ = _family_folder(str(tmp_path / family), family, kind)
    loaded = load_checkpoint(folder)
    assert isinstance(loaded.tokenizer, HFTokenizer)
    s = Session(loaded)
    s.set_prompt(PROMPT)
    assert list(s.tokens.ids) == tc.reference(folder)(PROMPT)["input_ids"]
    trace = s.run()
    assert trace.labels == loaded.tokenizer.tokenize(PROMPT).labels
    assert trace.special[0] == (kind != "byte_level")  # Llama's <s> and Gemma's <bos>; Qwen starts with none


def test_a_family_model_without_tokenizer_json_is_one_line(tmp_path):
    folder, n_vocab = _family_folder(str(tmp_path / "llama"), "llama", None)
    with pytest.raises(Exception) as e:
        load_checkpoint(folder)
    message = str(e.value)
    assert "tokenizer.json is missing" in message and f"({n_vocab} tokens)" in message
    assert "GPT-2's tokenizer would feed it the wrong ids" in message
    assert "\n" not in message
