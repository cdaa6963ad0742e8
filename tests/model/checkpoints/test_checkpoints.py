"""Every checkpoint format loads to the same numbers as its source, and every broken file is one
CheckpointError line a user can act on."""

from __future__ import annotations

import json
import os
import pickle
import sys

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from tests.helpers.failing_open import fail_opens
from tests.helpers.models import (
    TINY,
    hf_config,
    hf_model,
    nanogpt_checkpoint,
    nanogpt_from_ours,
    randomize_,
    save_hf_folder,
    save_tiny,
    tiny_gpt,
)
from tests.helpers.tolerances import assert_float32_close, model_reduction
from transformer_viewer.model.capture.session import Session
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from transformer_viewer.model.checkpoints.formats import native
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import CheckpointError

SMALL_VOCAB = 300


def ids(vocab: int = SMALL_VOCAB, T: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (1, T), generator=torch.Generator().manual_seed(seed))  # (1, T)


def assert_logits_match(loaded, ours, reference) -> None:
    """Within float32 rounding for this model's sums and depth (tests/helpers/tolerances.py): another
    implementation's kernels may add in another order, nothing more."""
    c = loaded.config
    assert_float32_close(ours, reference, reduction=model_reduction(c), depth=c.n_layer + 1, what="logits")


def our_logits(loaded, x) -> torch.Tensor:
    with torch.no_grad():
        return loaded.model(x)[0]


def hf_logits(model, x) -> torch.Tensor:
    with torch.no_grad():
        return model(x).logits


def load_error(source, **kw) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(source, **kw)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# -- native ---------------------------------------------------------------------------------
def test_native_round_trip(tmp_path):
    path = tmp_path / "m.safetensors"
    model = save_tiny(path)
    loaded = load_checkpoint(str(path))
    assert loaded.format == "native" and loaded.config == TINY and loaded.tokenizer.spec == "gpt2"
    x = ids(TINY.vocab_size)
    # Both the decoder's plain path (no kernels installed), so the same GEMM: the same weights must
    # then give the same bits, on every CPU and thread count.
    with torch.no_grad():
        expected = model(x)[0]
    torch.testing.assert_close(our_logits(loaded, x), expected, rtol=0, atol=0)
    assert loaded.model.lm_head.weight is loaded.model.wte.weight  # tied again after loading


def test_native_format_is_detected_from_content_not_extension(tmp_path):
    path = tmp_path / "weights.pt"
    save_tiny(path)
    assert load_checkpoint(str(path)).format == "native"


# -- nanoGPT --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hf_exact_gelu():
    return hf_model(hf_config(vocab_size=SMALL_VOCAB, activation_function="gelu"), seed=3)


def test_nanogpt_round_trip_from_hf_weights(tmp_path, hf_exact_gelu):
    ckpt = nanogpt_checkpoint(hf_exact_gelu)
    assert any(k.startswith("_orig_mod.") and k.endswith(".attn.bias") for k in ckpt["model"])
    torch.save(ckpt, tmp_path / "ckpt.pt")
    loaded = load_checkpoint(str(tmp_path / "ckpt.pt"))
    assert loaded.format == "nanogpt"
    c = loaded.config
    assert (c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size) == (2, 4, 32, 64, SMALL_VOCAB)
    assert c.activation == "gelu" and c.tie_embeddings and c.bias
    assert loaded.training["iter_num"] == 5000 and loaded.training["best_val_loss"] == pytest.approx(2.5)
    json.dumps(loaded.training)  # JSON-safe for `info --json`
    x = ids()
    assert_logits_match(loaded, our_logits(loaded, x), hf_logits(hf_exact_gelu, x))


def test_nanogpt_out_dir_folder_loads_its_ckpt(tmp_path, hf_exact_gelu):
    torch.save(nanogpt_checkpoint(hf_exact_gelu, compiled=False, mask_buffers=False), tmp_path / "ckpt.pt")
    assert load_checkpoint(str(tmp_path)).format == "nanogpt"


def test_nanogpt_bias_false(tmp_path):
    config = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=32, vocab_size=SMALL_VOCAB, bias=False,
                       activation="gelu")
    model = tiny_gpt(config, seed=4)
    ckpt = nanogpt_from_ours(model)
    assert not any(k.endswith(".bias") for k in ckpt["model"])
    torch.save(ckpt, tmp_path / "ckpt.pt")
    loaded = load_checkpoint(str(tmp_path / "ckpt.pt"))
    assert loaded.config.bias is False
    x = ids()
    with torch.no_grad():  # the same GEMM as our_logits, so only the conversion could differ
        expected = model(x)[0]
    torch.testing.assert_close(our_logits(loaded, x), expected, rtol=0, atol=1e-6)


def test_nanogpt_padded_vocab_keeps_50304_rows_and_session_ignores_the_padding(tmp_path):
    config = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, vocab_size=50304, activation="gelu")
    torch.save(nanogpt_from_ours(tiny_gpt(config)), tmp_path / "ckpt.pt")
    loaded = load_checkpoint(str(tmp_path / "ckpt.pt"))
    assert loaded.config.vocab_size == 50304
    session = Session(loaded)
    session.set_prompt("Hello world")
    nxt = session.predict(top_k=5)
    assert nxt.probs.shape == (50257,) and nxt.top_ids.max() < 50257
    assert abs(float(nxt.probs.sum()) - 1.0) < 1e-4


# -- Hugging Face folders -------------------------------------------------------------------
@pytest.fixture(scope="module")
def hf_tiny():
    return hf_model(hf_config(vocab_size=SMALL_VOCAB), seed=5)


@pytest.mark.parametrize("weights,prefix,old_buffers", [
    ("pretrained", True, False),
    ("safetensors", False, False),
    ("bin", True, True),
    ("bin", False, True),
])
def test_hf_folder_loads(tmp_path, hf_tiny, weights, prefix, old_buffers):
    folder = save_hf_folder(hf_tiny, tmp_path / "hf", weights=weights, prefix=prefix, old_buffers=old_buffers)
    loaded = load_checkpoint(folder)
    assert loaded.format == "huggingface"
    assert loaded.config.activation == "gelu_tanh" and loaded.config.n_mlp == 4 * 32
    x = ids()
    assert_logits_match(loaded, our_logits(loaded, x), hf_logits(hf_tiny, x))


def test_hf_weights_file_given_directly(tmp_path, hf_tiny):
    folder = save_hf_folder(hf_tiny, tmp_path / "hf", weights="bin")
    loaded = load_checkpoint(os.path.join(folder, "pytorch_model.bin"))
    assert loaded.format == "huggingface"
    assert_logits_match(loaded, our_logits(loaded, ids()), hf_logits(hf_tiny, ids()))


def test_hf_n_inner_epsilon_and_untied_head(tmp_path):
    from safetensors.torch import save_file as save_st

    model = hf_model(hf_config(vocab_size=SMALL_VOCAB, n_inner=48, layer_norm_epsilon=1e-3,
                               tie_word_embeddings=False, activation_function="relu"), seed=6)
    assert model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr()
    folder = tmp_path / "hf"
    folder.mkdir()
    model.config.save_pretrained(folder)
    save_st({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    loaded = load_checkpoint(str(folder))
    c = loaded.config
    assert (c.n_mlp, c.layer_norm_eps, c.tie_embeddings, c.activation) == (48, 1e-3, False, "relu")
    assert_logits_match(loaded, our_logits(loaded, ids()), hf_logits(model, ids()))


def test_hf_other_architecture_is_refused(tmp_path, hf_tiny):
    folder = save_hf_folder(hf_tiny, tmp_path / "hf", weights="safetensors")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg.update(model_type="mixtral", architectures=["MixtralForCausalLM"])
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    message = load_error(folder)
    assert "MixtralForCausalLM" in message and "mixture-of-experts" in message and "GPT2, Llama" in message


def test_hf_unsupported_activation_is_refused(tmp_path, hf_tiny):
    folder = save_hf_folder(hf_tiny, tmp_path / "hf", weights="safetensors")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["activation_function"] = "swish"
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    assert "swish" in load_error(folder)


# -- Hugging Face cache ---------------------------------------------------------------------
def _fake_cache(root, repo_dir: str, model) -> str:
    """The hub layout: blobs/ holding files, snapshots/<rev>/ linking to them, refs/main."""
    rev = "0123456789abcdef0123456789abcdef01234567"
    base = root / "hub" / repo_dir
    staging = save_hf_folder(model, root / "staging", weights="pretrained")
    (base / "blobs").mkdir(parents=True)
    snap = base / "snapshots" / rev
    snap.mkdir(parents=True)
    for i, name in enumerate(sorted(os.listdir(staging))):
        blob = base / "blobs" / f"blob{i}"
        os.replace(os.path.join(staging, name), blob)
        os.symlink(os.path.relpath(blob, snap), snap / name)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    return str(snap)


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the real ~/.cache must not leak in
    return tmp_path / "hf_home"


def test_hf_cache_name_is_found_offline(hf_home, hf_tiny):
    _fake_cache(hf_home, "models--gpt2", hf_tiny)
    loaded = load_checkpoint("gpt2")
    assert loaded.format == "huggingface" and loaded.name == "gpt2" and loaded.source == "gpt2"
    assert_logits_match(loaded, our_logits(loaded, ids()), hf_logits(hf_tiny, ids()))


def test_hf_cache_finds_the_organisation_spelling(hf_home, hf_tiny):
    _fake_cache(hf_home, "models--distilbert--distilgpt2", hf_tiny)
    assert load_checkpoint("distilgpt2").name == "distilgpt2"


def test_hf_cache_name_not_downloaded(hf_home):
    message = load_error("gpt2-medium")
    assert "not" in message and "download" in message and "never downloads" in message


def test_hf_cache_with_config_but_no_weights(hf_home, hf_tiny):
    snap = _fake_cache(hf_home, "models--gpt2", hf_tiny)
    os.unlink(os.path.join(snap, "model.safetensors"))
    assert "weights" in load_error("gpt2")


# -- tutorial GPTStyleModel -----------------------------------------------------------------
class FeedForward(nn.Module):
    def __init__(self, C: int, act: nn.Module):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(C, 4 * C), act, nn.Linear(4 * C, C), nn.Dropout(0.0))

    def forward(self, x):
        return self.net(x)


class TutorialBlock(nn.Module):
    def __init__(self, C: int, n_head: int, act: nn.Module):
        super().__init__()
        self.ln1 = nn.LayerNorm(C)
        self.attn = nn.MultiheadAttention(C, n_head, batch_first=True)
        self.ln2 = nn.LayerNorm(C)
        self.ff = FeedForward(C, act)

    def forward(self, x):
        T = x.shape[1]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)  # True = may not attend
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=future, need_weights=False)[0]
        return x + self.ff(self.ln2(x))


class GPTStyleModel(nn.Module):
    """The decoder of a typical "transformer from scratch" tutorial, on nn.MultiheadAttention."""

    def __init__(self, vocab: int, C: int, n_head: int, n_layer: int, block: int, act=None, tie: bool = False):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, C)
        self.pos_emb = nn.Embedding(block, C)
        self.blocks = nn.ModuleList(TutorialBlock(C, n_head, act or nn.GELU()) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(C)
        self.head = nn.Linear(C, vocab)
        if tie:
            self.head.weight = self.tok_emb.weight

    def forward(self, idx):
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _tutorial(seed=7, **kw) -> GPTStyleModel:
    torch.manual_seed(seed)
    args = dict(vocab=SMALL_VOCAB, C=32, n_head=4, n_layer=2, block=64)
    args.update(kw)
    return randomize_(GPTStyleModel(**args), seed).eval()


def test_tutorial_layout_matches_the_tutorial_model(tmp_path):
    model = _tutorial()
    torch.save(model.state_dict(), tmp_path / "tutorial.pt")
    loaded = load_checkpoint(str(tmp_path / "tutorial.pt"), n_head=4)
    c = loaded.config
    assert loaded.format == "tutorial"
    assert (c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size, c.activation) == (2, 4, 32, 64, SMALL_VOCAB, "gelu")
    assert c.tie_embeddings is False and c.extra.get("head_bias") is True
    x = ids()
    with torch.no_grad():
        assert_logits_match(loaded, our_logits(loaded, x), model(x))


def test_tutorial_with_relu_from_saved_config_tied_head_survives_native_resave(tmp_path):
    model = _tutorial(seed=8, act=nn.ReLU(), tie=True)
    wrapped = {"model_state_dict": model.state_dict(), "config": {"n_head": 4, "activation": "relu"}, "epoch": 3}
    torch.save(wrapped, tmp_path / "tutorial.pt")
    loaded = load_checkpoint(str(tmp_path / "tutorial.pt"))  # the head count comes from the saved config
    assert loaded.config.activation == "relu" and loaded.config.tie_embeddings
    x = ids()
    with torch.no_grad():
        expected = model(x)
    assert_logits_match(loaded, our_logits(loaded, x), expected)
    save_checkpoint(loaded.model, str(tmp_path / "again.safetensors"))
    again = load_checkpoint(str(tmp_path / "again.safetensors"))
    assert_logits_match(again, our_logits(again, x), expected)


def test_tutorial_as_safetensors(tmp_path):
    model = _tutorial(seed=9)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "t.safetensors"))
    loaded = load_checkpoint(str(tmp_path / "t.safetensors"), n_head=4)
    assert loaded.format == "tutorial"
    with torch.no_grad():
        assert_logits_match(loaded, our_logits(loaded, ids()), model(ids()))


def test_tutorial_without_head_count_says_to_pass_n_head(tmp_path):
    torch.save(_tutorial().state_dict(), tmp_path / "tutorial.pt")
    message = load_error(str(tmp_path / "tutorial.pt"))
    assert "--n-head" in message and "head count" in message
    assert "divide" in load_error(str(tmp_path / "tutorial.pt"), n_head=5)


# -- every error case -----------------------------------------------------------------------
def test_file_not_found(tmp_path):
    assert "file not found" in load_error(str(tmp_path / "missing.pt"))


def test_bundled_model_missing_is_a_clear_error(tmp_path, monkeypatch):
    """An install without the bundled model (as if its file were deleted): loading it says so."""
    missing = str(tmp_path / "bundled.safetensors")
    # Where load_checkpoint looks the bundled path up (it imports the name into its module).
    monkeypatch.setattr(sys.modules[load_checkpoint.__module__], "bundled_checkpoint_path", lambda: missing)
    message = load_error(None)
    assert "bundled model is not installed" in message and missing in message and "checkpoint path" in message


def test_unknown_format_says_what_was_found(tmp_path):
    (tmp_path / "notes.pt").write_text("hello, these are my notes\n")
    message = load_error(str(tmp_path / "notes.pt"))
    assert "unknown checkpoint format" in message and "hello" in message
    (tmp_path / "x.bin").write_bytes(b"\x1f\x8b" + bytes(30))
    assert "gzip" in load_error(str(tmp_path / "x.bin"))
    torch.save({"weights": torch.ones(3)}, tmp_path / "other.pt")
    message = load_error(str(tmp_path / "other.pt"))
    assert "unknown checkpoint format" in message and "weights" in message


def test_empty_file(tmp_path):
    (tmp_path / "empty.safetensors").write_bytes(b"")
    assert "empty" in load_error(str(tmp_path / "empty.safetensors"))


def test_truncated_files(tmp_path, hf_tiny):
    save_tiny(tmp_path / "m.safetensors")
    data = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) - 1000])
    assert "truncated" in load_error(str(tmp_path / "cut.safetensors"))
    (tmp_path / "cut_header.safetensors").write_bytes(data[:40])
    assert "truncated" in load_error(str(tmp_path / "cut_header.safetensors"))

    torch.save(nanogpt_checkpoint(hf_tiny), tmp_path / "ckpt.pt")
    data = (tmp_path / "ckpt.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    assert "truncated or corrupt" in load_error(str(tmp_path / "cut.pt"))

    folder = save_hf_folder(hf_tiny, tmp_path / "hf", weights="safetensors")
    weights = os.path.join(folder, "model.safetensors")
    data = open(weights, "rb").read()
    open(weights, "wb").write(data[: len(data) - 10])
    assert "truncated" in load_error(folder)


def test_corrupt_safetensors_header(tmp_path):
    save_tiny(tmp_path / "m.safetensors")
    data = bytearray((tmp_path / "m.safetensors").read_bytes())
    data[9:20] = b"\xff" * 11  # inside the JSON header
    (tmp_path / "bad.safetensors").write_bytes(bytes(data))
    assert "corrupt" in load_error(str(tmp_path / "bad.safetensors"))


def _native_with(tmp_path, edit) -> str:
    model = tiny_gpt(TINY)
    state = model.state_dict()
    state.pop("lm_head.weight")
    state = {k: v.clone() for k, v in state.items()}
    edit(state)
    path = str(tmp_path / "edited.safetensors")
    native.write_native(path, TINY, state)
    return path


def test_missing_keys_are_named(tmp_path):
    message = load_error(_native_with(tmp_path, lambda s: s.pop("blocks.1.ln_2.weight")))
    assert "missing keys" in message and "blocks.1.ln_2.weight" in message


def test_missing_keys_use_the_files_own_names(tmp_path, hf_tiny):
    folder = save_hf_folder(hf_tiny, tmp_path / "hf", weights="bin")
    path = os.path.join(folder, "pytorch_model.bin")
    state = torch.load(path, weights_only=True)
    del state["transformer.h.1.mlp.c_fc.bias"]
    torch.save(state, path)
    message = load_error(folder)
    assert "missing keys transformer.h.1.mlp.c_fc.bias" in message


def test_unexpected_keys_are_named(tmp_path, hf_exact_gelu):
    ckpt = nanogpt_checkpoint(hf_exact_gelu)
    ckpt["model"]["_orig_mod.transformer.h.0.attn.rotary.inv_freq"] = torch.ones(4)
    torch.save(ckpt, tmp_path / "ckpt.pt")
    message = load_error(str(tmp_path / "ckpt.pt"))
    assert "unexpected keys" in message and "_orig_mod.transformer.h.0.attn.rotary.inv_freq" in message


def test_shape_mismatch_names_key_expected_and_found(tmp_path):
    def edit(s):
        s["blocks.0.mlp.c_fc.weight"] = torch.zeros(100, 32)
    message = load_error(_native_with(tmp_path, edit))
    assert "shape mismatch for blocks.0.mlp.c_fc.weight" in message
    assert "expected (128, 32)" in message and "found (100, 32)" in message


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights(tmp_path, dtype, bad):
    def edit(s):
        w = s["blocks.1.attn.c_proj.weight"].to(dtype)
        w[3, 4] = bad
        s["blocks.1.attn.c_proj.weight"] = w
    message = load_error(_native_with(tmp_path, edit))
    assert "NaN or Inf" in message and "blocks.1.attn.c_proj.weight" in message


def test_the_largest_finite_weights_load(tmp_path):
    def edit(s):
        s["blocks.0.mlp.c_fc.weight"] = s["blocks.0.mlp.c_fc.weight"].half()
        s["blocks.0.mlp.c_fc.weight"][0, :2] = torch.tensor([65504.0, -65504.0])  # float16's limits
        s["blocks.1.mlp.c_fc.weight"][1, 1] = torch.finfo(torch.float32).max
    loaded = load_checkpoint(_native_with(tmp_path, edit))
    assert loaded.model.blocks[0].mlp.c_fc.weight[0, 0].item() == 65504.0


def test_integer_weights_are_refused(tmp_path):
    def edit(s):
        s["ln_f.weight"] = torch.ones(32, dtype=torch.int32)
    assert "floating point" in load_error(_native_with(tmp_path, edit))


class _Payload:
    """Unpickling this would create a file: proof that code ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("writer", ["torch", "pickle"])
def test_pickle_with_code_is_refused_without_running_it(tmp_path, writer):
    marker = tmp_path / "pwned"
    obj = {"model_args": {"n_layer": 1}, "model": {"x": _Payload(str(marker))}}
    path = tmp_path / "evil.pt"
    if writer == "torch":
        torch.save(obj, path)
    else:
        with open(path, "wb") as f:
            pickle.dump(obj, f)
    message = load_error(str(path))
    assert "needs code to load" in message and "refused" in message
    assert not marker.exists()


def test_unreadable_file(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    save_tiny(path)
    os.chmod(path, 0)
    try:
        if os.access(path, os.R_OK):  # root reads anything: make the opens refuse as they would for a user
            fail_opens(monkeypatch, path, lambda name: PermissionError(13, "Permission denied", name))
        assert "permission denied" in load_error(str(path))
    finally:
        os.chmod(path, 0o644)


def test_folder_with_nothing_useful(tmp_path):
    (tmp_path / "README.txt").write_text("hi")
    message = load_error(str(tmp_path))
    assert "no model" in message and "README.txt" in message
    (tmp_path / "empty").mkdir()
    assert "empty" in load_error(str(tmp_path / "empty"))


def test_hf_folder_without_weights(tmp_path):
    hf_config(vocab_size=SMALL_VOCAB).save_pretrained(tmp_path)
    assert "no weights" in load_error(str(tmp_path))


def test_hf_folder_with_broken_config_json(tmp_path, hf_tiny):
    folder = save_hf_folder(hf_tiny, tmp_path / "hf", weights="safetensors")
    (tmp_path / "hf" / "config.json").write_text("{ not json")
    assert "config.json" in load_error(folder)


# -- variants -------------------------------------------------------------------------------
class _ParamPositionsBiasFreeAttention(GPTStyleModel):
    """pos_emb as a (1, T, C) Parameter and MultiheadAttention(bias=False) beside biased Linears."""

    def __init__(self, vocab, C, n_head, n_layer, block):
        super().__init__(vocab, C, n_head, n_layer, block)
        self.pos_emb = nn.Parameter(torch.zeros(1, block, C))
        for b in self.blocks:
            b.attn = nn.MultiheadAttention(C, n_head, bias=False, batch_first=True)

    def forward(self, idx):
        x = self.tok_emb(idx) + self.pos_emb[:, : idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def test_tutorial_variants_parameter_positions_and_bias_free_attention(tmp_path):
    torch.manual_seed(12)
    model = randomize_(_ParamPositionsBiasFreeAttention(SMALL_VOCAB, 32, 4, 2, 64), 12).eval()
    assert "blocks.0.attn.in_proj_bias" not in model.state_dict()
    torch.save(model.state_dict(), tmp_path / "t.pt")
    loaded = load_checkpoint(str(tmp_path / "t.pt"), n_head=4)
    assert loaded.config.bias and loaded.config.block_size == 64
    assert torch.all(loaded.model.blocks[0].attn.c_attn.bias == 0)  # absent biases are zeros
    with torch.no_grad():
        assert_logits_match(loaded, our_logits(loaded, ids()), model(ids()))


def test_hf_sharded_safetensors(tmp_path, hf_tiny):
    from transformer_viewer.model.checkpoints.formats.huggingface import load_safetensors

    folder = tmp_path / "hf"
    save_hf_folder(hf_tiny, folder, weights="safetensors")
    state = load_safetensors(str(folder / "model.safetensors"))
    os.unlink(folder / "model.safetensors")
    keys = sorted(state)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    weight_map = {}
    for name, part in shards.items():
        save_file({k: state[k] for k in part}, str(folder / name))
        weight_map.update({k: name for k in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    loaded = load_checkpoint(str(folder))
    assert_logits_match(loaded, our_logits(loaded, ids()), hf_logits(hf_tiny, ids()))
    os.unlink(folder / "model-00002-of-00002.safetensors")
    assert "shard model-00002-of-00002.safetensors is missing" in load_error(str(folder))


def test_nanogpt_incomplete_model_args(tmp_path, hf_exact_gelu):
    ckpt = nanogpt_checkpoint(hf_exact_gelu)
    del ckpt["model_args"]["n_head"]
    torch.save(ckpt, tmp_path / "ckpt.pt")
    assert "model_args lack n_head" in load_error(str(tmp_path / "ckpt.pt"))


def test_hf_cache_without_refs_main_uses_a_snapshot(hf_home, hf_tiny):
    snap = _fake_cache(hf_home, "models--gpt2", hf_tiny)
    os.unlink(os.path.join(os.path.dirname(os.path.dirname(snap)), "refs", "main"))
    assert load_checkpoint("gpt2").format == "huggingface"


def test_hf_untied_config_without_head(tmp_path, hf_tiny):
    folder = save_hf_folder(hf_tiny, tmp_path / "hf", weights="safetensors")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    assert "lm_head.weight" in load_error(folder)


def test_gpt2_weights_without_config_say_what_is_missing(tmp_path, hf_tiny):
    torch.save(hf_tiny.state_dict(), tmp_path / "weights.pt")
    assert "config.json" in load_error(str(tmp_path / "weights.pt"))


def test_unknown_binary_data_is_called_binary(tmp_path):
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02abc\x03" * 8)
    message = load_error(str(tmp_path / "blob.bin"))
    assert "binary data starting 00 01 02" in message
