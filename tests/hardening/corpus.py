"""A generated corpus of hostile and broken checkpoints, built in a temporary folder by code
(nothing binary is committed). Each entry names the file, the message fragment its one-line
CheckpointError must contain, and how it was made.

Formats covered: our .safetensors, nanoGPT ckpt.pt (torch zip), legacy torch pickles, bare
pickles, Hugging Face folders, tutorial state dicts, random bytes under every extension.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import struct
from dataclasses import dataclass

import torch
from safetensors.torch import save_file

from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.checkpoints.formats import native
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.decoder.gpt import GPT

# Small vocabulary: the files stay a few hundred kB; only their defects matter here.
BASE = GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=64, vocab_size=512)
EXTENSIONS = (".safetensors", ".pt", ".bin", ".ckpt", ".pth")
MARKER_NAME = "payload-ran"
GOOD = ("good.safetensors", "nanogpt_good.pt", "legacy_good.pt", "hf_good", "tutorial_good.pt")  # undamaged originals


@dataclass(frozen=True)
class Bad:
    name: str  # short id, used in test ids
    path: str
    expect: str  # fragment (lower case) the one-line message must contain
    group: str  # what kind of damage


class Payload:
    """Unpickling this calls open(marker, "w"): the file existing afterwards proves code ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _model(config: GPTConfig = BASE, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(config).eval()


def _state(model: GPT) -> dict[str, torch.Tensor]:
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        state.pop("lm_head.weight", None)
    return state


def _native_meta(config_dict: dict) -> dict:
    return {"format": native.FORMAT_TAG, "config": json.dumps(config_dict), "tokenizer": "gpt2", "training": "{}"}


def _write_native(path: str, state: dict, config_dict: dict) -> str:
    save_file({k: v.contiguous() for k, v in state.items()}, path, metadata=_native_meta(config_dict))
    return path


def _nanogpt(model: GPT) -> dict:
    c = model.config
    state = {}
    for k, v in model.state_dict().items():
        name = "lm_head.weight" if k == "lm_head.weight" else "transformer." + k.replace("blocks.", "h.", 1)
        state["_orig_mod." + name] = v.detach().clone()
    args = dict(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, block_size=c.block_size, bias=c.bias,
                vocab_size=c.vocab_size, dropout=0.0)
    return {"model": state, "model_args": args, "iter_num": 1, "best_val_loss": 3.0}


def _hf_folder(folder: str, model: GPT, config_json: dict | None = None, state_edit=None) -> str:
    """A GPT-2 layout folder (Conv1D weights transposed) with config.json."""
    os.makedirs(folder, exist_ok=True)
    c = model.config
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": c.n_layer, "n_head": c.n_head,
           "n_embd": c.n_embd, "n_positions": c.block_size, "vocab_size": c.vocab_size,
           "activation_function": "gelu_new"}
    cfg.update(config_json or {})
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    state = {}
    for k, v in _state(model).items():
        v = v.clone()
        if k.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")):
            v = v.t().contiguous()  # Linear (out, in) -> Conv1D (in, out)
        state["transformer." + k.replace("blocks.", "h.", 1)] = v
    if state_edit is not None:
        state_edit(state)
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return folder


def _cut(src: str, dst: str, n: int) -> str:
    with open(src, "rb") as f:
        data = f.read(n)
    with open(dst, "wb") as f:
        f.write(data)
    return dst


def build(root: str) -> tuple[list[Bad], str]:
    """Write the corpus under `root`; returns (entries, payload marker path that must never appear)."""
    os.makedirs(root, exist_ok=True)
    rng = random.Random(1234)
    out: list[Bad] = []
    marker = os.path.join(root, MARKER_NAME)

    def add(name, path, expect, group):
        out.append(Bad(name, str(path), expect.lower(), group))

    def p(name):
        return os.path.join(root, name)

    model = _model()
    good_native = p("good.safetensors")
    save_checkpoint(model, good_native)
    good_cfg = model.config.to_dict()

    # -- empty and random bytes -------------------------------------------------------------
    for ext in EXTENSIONS:
        open(p("empty" + ext), "wb").close()
        add(f"empty{ext}", p("empty" + ext), "empty (0 bytes)", "empty")
    for ext in EXTENSIONS:
        data = bytes(rng.randrange(256) for _ in range(4096))
        if data[0] == 0x80 or data.startswith(b"PK"):
            data = b"\x00" + data[1:]  # plain noise, not by chance a pickle or zip header
        with open(p("random" + ext), "wb") as f:
            f.write(data)
        add(f"random{ext}", p("random" + ext), "unknown checkpoint format", "random")
    noise = bytes(rng.randrange(256) for _ in range(2048))
    for name, head, expect in (
        ("zipmagic.pt", b"PK\x03\x04", "zip archive"),
        ("picklehead.pt", b"\x80\x02", "pickle"),
        ("legacyhead.pt", b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", "corrupt"),
        ("sthead.safetensors", struct.pack("<Q", 40) + b"{", "corrupt safetensors header"),
        ("sthuge.safetensors", struct.pack("<Q", 1 << 26) + b"{", "truncated safetensors"),
        ("gzip.bin", b"\x1f\x8b\x08", "gzip"),
        ("gguf.bin", b"GGUF", "gguf"),
    ):
        with open(p(name), "wb") as f:
            f.write(head + noise)
        add(name, p(name), expect, "random")
    with open(p("text.ckpt"), "w", encoding="utf-8") as f:
        f.write("this is not a checkpoint\n" * 10)
    add("text.ckpt", p("text.ckpt"), "text starting", "random")
    with open(p("json.pt"), "w", encoding="utf-8") as f:
        json.dump({"n_layer": 2}, f)
    add("json.pt", p("json.pt"), "json text", "random")

    # -- truncated safetensors ------------------------------------------------------------------
    size = os.path.getsize(good_native)
    (header_len,) = struct.unpack("<Q", open(good_native, "rb").read(8))
    for cut in (4, 8, 9, 8 + header_len // 2, 8 + header_len, 8 + header_len + 10, size // 2, size - 1):
        expect = "binary data" if cut < 9 else "truncated safetensors"
        add(f"trunc_st_{cut}", _cut(good_native, p(f"trunc_{cut}.safetensors"), cut), expect, "truncated")

    # -- truncated torch zip and legacy pickle ------------------------------------------------
    zip_path = p("nanogpt_good.pt")
    torch.save(_nanogpt(model), zip_path)
    zsize = os.path.getsize(zip_path)
    for cut in (10, 200, zsize // 3, (2 * zsize) // 3, zsize - 22, zsize - 1):
        add(f"trunc_zip_{cut}", _cut(zip_path, p(f"trunc_zip_{cut}.pt"), cut), "truncated or corrupt zip", "truncated")
    legacy = p("legacy_good.pt")
    torch.save(_nanogpt(model), legacy, _use_new_zipfile_serialization=False)
    lsize = os.path.getsize(legacy)
    for cut in (20, 300, lsize // 2, lsize - 1):
        add(f"trunc_legacy_{cut}", _cut(legacy, p(f"trunc_legacy_{cut}.pt"), cut), "truncated or corrupt torch", "truncated")
    bare = p("bare_good.pkl.bin")
    with open(bare, "wb") as f:
        pickle.dump({"a": list(range(200))}, f, protocol=4)
    add("bare_cut", _cut(bare, p("bare_cut.bin"), os.path.getsize(bare) // 2), "truncated or corrupt pickle",
        "truncated")

    # -- valid native containers with bad contents ---------------------------------------------
    def native_edit(name, edit, expect, cfg=None):
        state = _state(model)
        edit(state)
        add(name, _write_native(p(name + ".safetensors"), state, cfg or good_cfg), expect, "contents")

    native_edit("st_missing_key", lambda s: s.pop("blocks.1.mlp.c_fc.weight"), "missing keys blocks.1.mlp.c_fc.weight")
    native_edit("st_extra_key", lambda s: s.__setitem__("blocks.9.attn.secret", torch.zeros(3)), "unexpected keys")
    native_edit("st_wrong_shape", lambda s: s.__setitem__("ln_f.weight", torch.ones(17)), "shape mismatch for ln_f.weight")
    native_edit("st_int_dtype", lambda s: s.__setitem__("ln_f.bias", torch.zeros(16, dtype=torch.int64)), "int64")
    native_edit("st_bool_dtype", lambda s: s.__setitem__("ln_f.bias", torch.zeros(16, dtype=torch.bool)), "bool")
    native_edit("st_nan", lambda s: s["blocks.0.attn.c_attn.weight"].__setitem__((0, 0), float("nan")), "nan or inf")
    native_edit("st_inf", lambda s: s["wte.weight"].__setitem__((3, 1), float("inf")), "nan or inf")
    native_edit("st_neg_inf", lambda s: s["wpe.weight"].__setitem__((5, 2), float("-inf")), "nan or inf")

    # -- absurd configs (native metadata) ----------------------------------------------------------
    absurd = [
        ("cfg_zero_layers", {"n_layer": 0}, "n_layer must be positive"),
        ("cfg_negative_heads", {"n_head": -2}, "n_head must be positive"),
        ("cfg_zero_embd", {"n_embd": 0}, "n_embd must be positive"),
        ("cfg_indivisible", {"n_head": 3}, "not divisible by n_head"),
        ("cfg_block_1e9", {"block_size": 10**9}, "block_size=1000000000"),
        ("cfg_vocab_1e9", {"vocab_size": 10**9}, "vocab_size=1000000000"),
        ("cfg_string_size", {"n_embd": "16"}, "must be an integer"),
        ("cfg_float_size", {"n_layer": 2.0}, "must be an integer"),
        ("cfg_bad_activation", {"activation": "swish"}, "activation must be"),
        ("cfg_bad_dropout", {"dropout": 5}, "dropout"),
        ("cfg_bad_eps", {"layer_norm_eps": 0}, "layer_norm_eps"),
        ("cfg_not_object", None, "not a json object"),
    ]
    for name, change, expect in absurd:
        cfg = json.dumps([1, 2]) if change is None else json.dumps({**good_cfg, **change})
        meta = {"format": native.FORMAT_TAG, "config": cfg, "tokenizer": "gpt2", "training": "{}"}
        save_file(_state(model), p(name + ".safetensors"), metadata=meta)
        add(name, p(name + ".safetensors"), expect, "config")
    meta = {"format": native.FORMAT_TAG, "tokenizer": "gpt2"}
    save_file(_state(model), p("cfg_missing.safetensors"), metadata=meta)
    add("cfg_missing", p("cfg_missing.safetensors"), "no valid 'config'", "config")
    meta = {"format": native.FORMAT_TAG, "config": "{not json", "tokenizer": "gpt2"}
    save_file(_state(model), p("cfg_garbage.safetensors"), metadata=meta)
    add("cfg_garbage", p("cfg_garbage.safetensors"), "'config' metadata: not valid json", "config")
    meta = {"format": native.FORMAT_TAG, "config": json.dumps(good_cfg), "tokenizer": "llama"}
    save_file(_state(model), p("cfg_tokenizer.safetensors"), metadata=meta)
    add("cfg_tokenizer", p("cfg_tokenizer.safetensors"), "needs the 'llama' tokenizer", "config")
    # A vocabulary past what GPT-2's tokenizer (50257, nanoGPT pads to 50304) can ever index:
    # the model was trained with another tokenizer, whose ids we cannot produce.
    big = _model(BASE.replace(vocab_size=60000), seed=1)
    save_checkpoint(big, p("cfg_vocab_60000.safetensors"))
    add("cfg_vocab_60000", p("cfg_vocab_60000.safetensors"), "vocab_size 60000", "config")

    # -- nanoGPT dicts with bad contents -------------------------------------------------------------
    def nano(name, edit, expect, legacy_format=False):
        obj = _nanogpt(model)
        edit(obj)
        kw = {"_use_new_zipfile_serialization": False} if legacy_format else {}
        torch.save(obj, p(name + ".pt"), **kw)
        add(name, p(name + ".pt"), expect, "contents")

    nano("ng_missing_key", lambda o: o["model"].pop("_orig_mod.transformer.h.0.ln_1.weight"),
         "missing keys _orig_mod.transformer.h.0.ln_1.weight")
    nano("ng_extra_key", lambda o: o["model"].__setitem__("_orig_mod.transformer.h.7.mlp.gate.weight", torch.ones(2)),
         "unexpected keys _orig_mod.transformer.h.7.mlp.gate.weight")
    nano("ng_wrong_shape", lambda o: o["model"].__setitem__("_orig_mod.transformer.wpe.weight", torch.zeros(63, 16)),
         "shape mismatch for _orig_mod.transformer.wpe.weight")
    nano("ng_int_dtype", lambda o: o["model"].__setitem__("_orig_mod.transformer.ln_f.weight",
                                                           torch.ones(16, dtype=torch.int32)), "int32")
    nano("ng_complex_dtype", lambda o: o["model"].__setitem__("_orig_mod.transformer.ln_f.weight",
                                                               torch.ones(16, dtype=torch.complex64)), "complex64")
    nano("ng_nan", lambda o: o["model"]["_orig_mod.transformer.h.1.mlp.c_proj.weight"].__setitem__((1, 1), float("nan")),
         "nan or inf", legacy_format=True)
    nano("ng_not_tensor", lambda o: o["model"].__setitem__("_orig_mod.transformer.ln_f.bias", [0.0] * 16),
         "is not a tensor")
    nano("ng_args_missing", lambda o: o["model_args"].pop("n_embd"), "lack n_embd")
    nano("ng_args_zero_heads", lambda o: o["model_args"].__setitem__("n_head", 0), "n_head must be positive")
    nano("ng_args_indivisible", lambda o: o["model_args"].__setitem__("n_head", 5), "not divisible")
    nano("ng_args_block_1e9", lambda o: o["model_args"].__setitem__("block_size", 10**9), "block_size")
    nano("ng_args_string", lambda o: o["model_args"].__setitem__("n_layer", "2"), "must be an integer")
    # 60000 rows, a real tensor of them: a tokenizer GPT-2's cannot stand in for.
    obj = _nanogpt(big)
    torch.save(obj, p("ng_vocab_60000.pt"))
    add("ng_vocab_60000", p("ng_vocab_60000.pt"), "vocab_size 60000", "config")

    # -- code-carrying pickles: refused, the payload never runs ---------------------------------------
    evil = {"model_args": dict(_nanogpt(model)["model_args"]), "model": {"x": Payload(marker)}}
    torch.save(evil, p("evil_zip.pt"))
    add("evil_zip", p("evil_zip.pt"), "needs code to load", "code")
    torch.save(evil, p("evil_legacy.ckpt"), _use_new_zipfile_serialization=False)
    add("evil_legacy", p("evil_legacy.ckpt"), "needs code to load", "code")
    with open(p("evil_bare.pth"), "wb") as f:
        pickle.dump(evil, f, protocol=4)
    add("evil_bare", p("evil_bare.pth"), "needs code to load", "code")
    with open(p("evil_bare_p2.bin"), "wb") as f:
        pickle.dump(Payload(marker), f, protocol=2)
    add("evil_bare_p2", p("evil_bare_p2.bin"), "needs code to load", "code")
    with open(p("evil_p0.pt"), "wb") as f:
        pickle.dump(Payload(marker), f, protocol=0)  # a text pickle: no protocol byte at all
    add("evil_p0", p("evil_p0.pt"), "unknown checkpoint format", "code")
    harmless = {"model_args": {"n_layer": 1}, "model": {"x": 1}}
    with open(p("bare_plain.pt"), "wb") as f:
        pickle.dump(harmless, f, protocol=4)
    add("bare_plain", p("bare_plain.pt"), "plain python pickle", "code")

    # -- torch files that are no known layout ---------------------------------------------------------
    torch.save({"weights": torch.zeros(3)}, p("torch_unknown.pt"))
    add("torch_unknown", p("torch_unknown.pt"), "matches no known layout", "layout")
    torch.save([torch.zeros(3)], p("torch_list.pt"))
    add("torch_list", p("torch_list.pt"), "a list", "layout")
    torch.save(torch.zeros(3), p("torch_tensor.bin"))
    add("torch_tensor", p("torch_tensor.bin"), "a tensor", "layout")
    import zipfile

    with zipfile.ZipFile(p("foreign.zip.pt"), "w") as z:
        z.writestr("readme.txt", "hello")
    add("foreign_zip", p("foreign.zip.pt"), "not a torch checkpoint", "layout")
    save_file({"foo": torch.zeros(2)}, p("st_foreign.safetensors"))
    add("st_foreign", p("st_foreign.safetensors"), "match no known layout", "layout")
    # Tutorial GPTStyleModel state without its head count, and with one that cannot divide n_embd.
    tut = {"tok_emb.weight": torch.randn(512, 16), "blocks.0.attn.in_proj_weight": torch.randn(48, 16)}
    torch.save(tut, p("tutorial_no_heads.pt"))
    add("tutorial_no_heads", p("tutorial_no_heads.pt"), "--n-head", "layout")

    # -- Hugging Face folders ------------------------------------------------------------------------
    add("hf_bert", _hf_folder(p("hf_bert"), model, {"model_type": "bert", "architectures": ["BertForMaskedLM"]}),
        "model_type 'bert'", "hf")
    add("hf_llama", _hf_folder(p("hf_llama"), model, {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}),
        "bad config.json for LlamaForCausalLM: num_attention_heads is missing", "hf")
    add("hf_no_type", _hf_folder(p("hf_no_type"), model, {"model_type": None}), "model_type none", "hf")
    add("hf_zero_heads", _hf_folder(p("hf_zero_heads"), model, {"n_head": 0}), "n_head must be positive", "hf")
    add("hf_block_1e9", _hf_folder(p("hf_block_1e9"), model, {"n_positions": 10**9}), "block_size", "hf")
    add("hf_cross_attn", _hf_folder(p("hf_cross_attn"), model, {"add_cross_attention": True}), "cross-attention", "hf")
    add("hf_activation", _hf_folder(p("hf_activation"), model, {"activation_function": "silu"}),
        "activation_function 'silu'", "hf")
    add("hf_missing_key", _hf_folder(p("hf_missing_key"), model,
                                     state_edit=lambda s: s.pop("transformer.h.1.attn.c_attn.bias")),
        "missing keys transformer.h.1.attn.c_attn.bias", "hf")
    add("hf_wrong_shape", _hf_folder(p("hf_wrong_shape"), model,
                                     state_edit=lambda s: s.__setitem__("transformer.wte.weight", torch.zeros(512, 8))),
        "shape mismatch for transformer.wte.weight", "hf")
    os.makedirs(p("hf_no_weights"))
    with open(p("hf_no_weights/config.json"), "w", encoding="utf-8") as f:
        json.dump({"model_type": "gpt2"}, f)
    add("hf_no_weights", p("hf_no_weights"), "no weights", "hf")
    os.makedirs(p("hf_bad_json"))
    with open(p("hf_bad_json/config.json"), "w", encoding="utf-8") as f:
        f.write("{ not json")
    add("hf_bad_json", p("hf_bad_json"), "not valid json", "hf")
    os.makedirs(p("hf_json_list"))
    with open(p("hf_json_list/config.json"), "w", encoding="utf-8") as f:
        f.write("[1, 2, 3]")
    add("hf_json_list", p("hf_json_list"), "not a json object", "hf")
    _hf_folder(p("hf_good"), model)  # the undamaged original: must load
    hf_trunc = _hf_folder(p("hf_trunc"), model)
    weights = os.path.join(hf_trunc, "model.safetensors")
    _cut(weights, weights + ".tmp", os.path.getsize(weights) // 2)
    os.replace(weights + ".tmp", weights)
    add("hf_trunc", hf_trunc, "truncated", "hf")

    os.makedirs(p("hf_bin_list"))
    with open(p("hf_bin_list/config.json"), "w", encoding="utf-8") as f:
        json.dump({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16, "n_positions": 64, "vocab_size": 512}, f)
    torch.save([torch.zeros(3)], p("hf_bin_list/pytorch_model.bin"))
    add("hf_bin_list", p("hf_bin_list"), "holds a list, not a state dict", "hf")
    for name, index, expect in (("hf_index_garbage", "{ nope", "not a valid shard index"),
                                ("hf_index_missing", json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}),
                                 "shard model-00001-of-00002.safetensors is missing")):
        os.makedirs(p(name))
        with open(p(f"{name}/config.json"), "w", encoding="utf-8") as f:
            json.dump({"model_type": "gpt2"}, f)
        with open(p(f"{name}/model.safetensors.index.json"), "w", encoding="utf-8") as f:
            f.write(index)
        add(name, p(name), expect, "hf")

    # -- safetensors headers that parse as JSON but describe impossible tensors ------------------------------
    tag = {"format": native.FORMAT_TAG, "config": json.dumps(good_cfg)}
    for name, entry in (("st_bad_dtype", {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}),
                        ("st_bad_size", {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}),
                        ("st_negative_shape", {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})):
        header = json.dumps({"__metadata__": tag, "w": entry}).encode()
        with open(p(name + ".safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + b"\0" * 4)
        add(name, p(name + ".safetensors"), "not a readable safetensors file", "contents")

    # -- tutorial GPTStyleModel state dicts that cannot be a model ---------------------------------------------
    def tutorial(name, edit, expect, n_head=2):
        C = 16
        state = {"tok_emb.weight": torch.randn(512, C), "pos_emb.weight": torch.randn(64, C),
                 "blocks.0.ln1.weight": torch.ones(C), "blocks.0.ln1.bias": torch.zeros(C),
                 "blocks.0.ln2.weight": torch.ones(C), "blocks.0.ln2.bias": torch.zeros(C),
                 "blocks.0.attn.in_proj_weight": torch.randn(3 * C, C), "blocks.0.attn.in_proj_bias": torch.zeros(3 * C),
                 "blocks.0.attn.out_proj.weight": torch.randn(C, C), "blocks.0.attn.out_proj.bias": torch.zeros(C),
                 "blocks.0.ff.net.0.weight": torch.randn(4 * C, C), "blocks.0.ff.net.0.bias": torch.zeros(4 * C),
                 "blocks.0.ff.net.2.weight": torch.randn(C, 4 * C), "blocks.0.ff.net.2.bias": torch.zeros(C),
                 "ln_f.weight": torch.ones(C), "ln_f.bias": torch.zeros(C), "head.weight": torch.randn(512, C)}
        edit(state)
        torch.save({"model_state_dict": state, "config": {"n_head": n_head}}, p(name + ".pt"))
        add(name, p(name + ".pt"), expect, "layout")

    tutorial("tutorial_good", lambda s: None, "")  # the undamaged original: must load
    out.pop()
    tutorial("tutorial_3d_embedding", lambda s: s.__setitem__("tok_emb.weight", torch.randn(2, 512, 16)),
             "tok_emb.weight has shape (2, 512, 16)")
    tutorial("tutorial_two_position_tables", lambda s: s.__setitem__("pos_emb", torch.randn(64, 16)),
             "several position tables")
    tutorial("tutorial_position_width", lambda s: s.__setitem__("pos_emb.weight", torch.randn(64, 8)),
             "shape mismatch for pos_emb.weight: expected (block_size, 16)")
    tutorial("tutorial_one_linear", lambda s: (s.pop("blocks.0.ff.net.2.weight"), s.pop("blocks.0.ff.net.2.bias")),
             "blocks.0.ff.net has 1 linear layers")
    tutorial("tutorial_empty_vocab", lambda s: (s.__setitem__("tok_emb.weight", torch.randn(0, 16)),
                                                s.__setitem__("head.weight", torch.randn(0, 16))),
             "these weights make no valid model")
    tutorial("tutorial_bias_kv", lambda s: s.__setitem__("blocks.0.attn.bias_k", torch.zeros(1, 1, 16)),
             "add_bias_kv=true")
    tutorial("tutorial_partial_qkv", lambda s: (s.pop("blocks.0.attn.in_proj_weight"),
                                                s.__setitem__("blocks.0.attn.q_proj_weight", torch.randn(16, 16))),
             "the attention weights are incomplete")
    tutorial("tutorial_heads_indivisible", lambda s: None, "--n-head 3 does not divide n_embd=16", n_head=3)

    # -- folders with nothing useful --------------------------------------------------------------------
    os.makedirs(p("dir_empty"))
    add("dir_empty", p("dir_empty"), "it is empty", "folder")
    os.makedirs(p("dir_junk"))
    for name in ("notes.txt", "data.csv", "image.png"):
        with open(os.path.join(p("dir_junk"), name), "w") as f:
            f.write("x")
    add("dir_junk", p("dir_junk"), "no model in it", "folder")
    os.makedirs(p("dir_bad_ckpt"))
    open(os.path.join(p("dir_bad_ckpt"), "ckpt.pt"), "wb").close()
    add("dir_bad_ckpt", p("dir_bad_ckpt"), "empty (0 bytes)", "folder")
    add("missing_file", p("does-not-exist.pt"), "file not found", "folder")
    add("missing_name", p("nope/gpt2-tiny"), "file not found", "folder")
    return out, marker
