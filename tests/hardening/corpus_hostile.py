"""A second generated corpus: files that are valid containers but hostile inside. Built by code in
a temporary folder (nothing binary is committed). Classes:

- json: JSON nested 1,000 deep, integers of 5,000 digits, 1e400, NaN and oversized files, in
  each place we parse JSON (config.json, our config and training metadata, a safetensors
  header, a shard index);
- schema: values of the wrong type where our config, nanoGPT's model_args or our training
  record expect another (strings for numbers, a tensor for a flag, a list for an object);
- amplify: small files that describe far more than they store (stride-0 views, many names for
  one storage, a deflated torch zip, 6,000 tutorial layers, huge layer indices, 40,000 shard
  names for one file), refused before anything is materialised;
- shards: index entries outside the folder, the wrong file named as a shard, broken maps;
- keys, float8, links: non-string state-dict keys, float8/float4 weights, symlink loops, links
  that lead a folder's files out of it (a cache snapshot's into its own blobs/ only);
- tokenizer: a folder's tokenizer.json whose regexes would backtrack without end (nested
  quantifiers, a huge alternation, a pattern past the length bound), refused at load.

Each entry is a `Bad` (must be one CheckpointError line containing `expect`) or, with
`expect=None`, a hostile-looking file that is in fact a good model and must load.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile

import torch
from safetensors.torch import save_file

from tests.hardening.corpus import (
    BASE,
    Bad,
    _hf_folder,
    _model,
    _nanogpt,
    _native_meta,
    _state,
    _write_native,
)
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.decoder.config import GPTConfig

DEEP = "[" * 1000 + "]" * 1000
BIG_INT = "1" + "0" * 5000
HUGE = 17 << 20  # past the 16 MiB any JSON we read may be
GROUPS = ("json", "schema", "amplify", "shards", "keys", "float8", "links", "tokenizer")


def build(root: str) -> list[Bad]:
    os.makedirs(root, exist_ok=True)
    out: list[Bad] = []
    model = _model()
    cfg = model.config.to_dict()

    def p(name):
        return os.path.join(root, name)

    def add(name, path, expect, group):
        out.append(Bad(name, str(path), None if expect is None else expect.lower(), group))

    # -- json: every place we parse JSON, every way JSON can hurt ---------------------------------
    def raw_config_json(name, text):
        folder = _hf_folder(p(name), model)
        with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
            f.write(text)
        return folder

    hf_cfg = ('{"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16, "n_positions": 64, '
              '"vocab_size": 512, %s}')
    for name, field, expect in (("deep", f'"task_specific_params": {DEEP}', "1001 levels deep"),
                                ("bigint", f'"n_ctx": {BIG_INT}', "number of 5001 digits"),
                                ("resid_1e400", '"resid_pdrop": 1e400', "1e400 is out of range"),
                                ("eps_1e400", '"layer_norm_epsilon": -1e400', "-1e400 is out of range"),
                                ("nan", '"resid_pdrop": NaN', "nan where a finite number"),
                                ("infinity", '"layer_norm_epsilon": Infinity', "infinity where a finite number")):
        add(f"hf_json_{name}", raw_config_json(f"hf_json_{name}", hf_cfg % field), expect, "json")
    folder = _hf_folder(p("hf_json_huge"), model)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        f.write('{"model_type": "gpt2"' + " " * HUGE + "}")
    add("hf_json_huge", folder, "more than the 16 mib", "json")

    def native_raw(name, config_text=None, training_text="{}"):
        meta = _native_meta(cfg)
        if config_text is not None:
            meta["config"] = config_text
        meta["training"] = training_text
        save_file(_state(model), p(name + ".safetensors"), metadata=meta)
        return p(name + ".safetensors")

    good_cfg_text = json.dumps(cfg)
    for name, text, expect in (
        ("deep", good_cfg_text[:-1] + f', "extra": {{"x": {DEEP}}}}}', "levels deep"),
        ("bigint", good_cfg_text[:-1] + f', "n_mlp": {BIG_INT}}}', "number of 5001 digits"),
        ("dropout_1e400", good_cfg_text.replace('"dropout": 0.0', '"dropout": 1e400'), "1e400 is out of range"),
        ("eps_nan", good_cfg_text.replace('"layer_norm_eps": 1e-05', '"layer_norm_eps": NaN'), "nan where"),
    ):
        add(f"native_cfg_{name}", native_raw(f"native_cfg_{name}", config_text=text), expect, "json")
    for name, text, expect in (("deep", f'{{"history": {DEEP}}}', "levels deep"),
                               ("bigint", f'{{"steps": {BIG_INT}}}', "number of 5001 digits"),
                               ("1e400", '{"final_val_loss": 1e400}', "1e400 is out of range")):
        add(f"native_training_{name}", native_raw(f"native_training_{name}", training_text=text), expect, "json")

    def raw_safetensors(name, header_text: str, data: bytes = b"\0" * 4):
        header = header_text.encode()
        with open(p(name + ".safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + data)
        return p(name + ".safetensors")

    for name, text, expect in (
        ("deep", f'{{"__metadata__": {{"format": "pt"}}, "w": {{"dtype": "F32", "shape": [1], '
                 f'"data_offsets": [0, 4], "x": {DEEP}}}}}', "levels deep"),
        ("bigint", f'{{"w": {{"dtype": "F32", "shape": [1], "data_offsets": [0, {BIG_INT}]}}}}', "number of 5001 digits"),
        ("1e400", '{"w": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 4]}}', "1e400 is out of range"),
        ("nan", '{"w": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}', "nan where"),
        ("many_tensors", "{" + ", ".join(f'"t{i}": {{"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}'
                                         for i in range(100_001)) + "}", "lists 100,001 tensors"),
    ):
        add(f"st_header_{name}", raw_safetensors(f"st_header_{name}", text), expect, "json")
    header = '{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}' + " " * HUGE + "}"
    add("st_header_huge", raw_safetensors("st_header_huge", header), "more than the 16 mib", "json")

    # -- shard indexes ------------------------------------------------------------------------------
    def sharded(name, edit_index=None, extra_files=()):
        """An HF folder whose weights are split over two shards and an index."""
        folder = _hf_folder(p(name), model)
        weights = os.path.join(folder, "model.safetensors")
        from safetensors.torch import load_file

        state = load_file(weights)
        os.remove(weights)
        keys = sorted(state)
        halves = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
        weight_map = {}
        for shard, names in halves.items():
            save_file({k: state[k] for k in names}, os.path.join(folder, shard), metadata={"format": "pt"})
            weight_map.update({k: shard for k in names})
        index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
        for extra in extra_files:
            extra(folder)
        text = json.dumps(index) if edit_index is None else edit_index(index)
        with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
            f.write(text)
        return folder

    def retarget(name):
        """The index names `name` for its first tensor."""
        def edit(index):
            index["weight_map"][sorted(index["weight_map"])[0]] = name
            return json.dumps(index)
        return edit

    def many_folders(count):
        """`count` more names, one shard's file name under as many folders."""
        def edit(index):
            index["weight_map"].update({f"extra.{i}": f"d{i}/model-00001-of-00002.safetensors" for i in range(count)})
            return json.dumps(index)
        return edit

    add("shards_good", sharded("shards_good"), None, "shards")
    add("shards_same_file_twice", sharded("shards_same_file_twice", lambda ix: json.dumps(
        {**ix, "weight_map": {**ix["weight_map"], "extra.a": "./model-00001-of-00002.safetensors"}})),
        None, "shards")  # two names for one file: it loads, the file read once
    os.makedirs(p("outside_dir"), exist_ok=True)
    save_file({"x": torch.zeros(1)}, p("outside_dir/stolen.safetensors"))
    add("shards_outside", sharded("shards_outside", retarget("../outside_dir/stolen.safetensors")),
        "refused: outside the checkpoint folder", "shards")
    add("shards_absolute", sharded("shards_absolute", retarget(p("outside_dir/stolen.safetensors"))),
        "refused: outside the checkpoint folder", "shards")
    add("shards_nul_name", sharded("shards_nul_name", retarget("model\x00.safetensors")),
        "a file name with a nul byte", "shards")
    add("shards_config_json", sharded("shards_config_json", retarget("config.json")),
        "shard config.json is not a weights file (found json text", "shards")
    add("shards_empty_file", sharded("shards_empty_file", retarget("empty.bin"),
                                     [lambda folder: open(os.path.join(folder, "empty.bin"), "wb").close()]),
        "found an empty file", "shards")
    add("shards_40000_folders", sharded("shards_40000_folders", many_folders(40_000)), "names 40,002 shard files",
        "shards")
    add("shards_2000_names", sharded("shards_2000_names", lambda ix: json.dumps(
        {"weight_map": {f"t{i}": f"model-{i:05d}-of-02000.safetensors" for i in range(2000)}})),
        "names 2,000 shard files", "shards")
    add("shards_list", sharded("shards_list", lambda ix: "[1, 2, 3]"), "it needs a weight_map", "shards")
    add("shards_int_names", sharded("shards_int_names", lambda ix: json.dumps({"weight_map": {"a": 1}})),
        "it needs a weight_map", "shards")
    add("shards_deep", sharded("shards_deep", lambda ix: json.dumps(ix)[:-1] + f', "x": {DEEP}}}'),
        "not a valid shard index: json nested", "json")
    add("shards_bigint", sharded("shards_bigint", lambda ix: json.dumps(ix)[:-1] + f', "x": {BIG_INT}}}'),
        "number of 5001 digits", "json")
    add("shards_huge", sharded("shards_huge", lambda ix: json.dumps(ix) + " " * HUGE), "more than the 16 mib", "json")

    # -- schema: the wrong type where a number, flag or object belongs ------------------------------
    for name, change, expect in (
        ("dropout_string", {"dropout": "0.1"}, "dropout must be a finite number, got '0.1' (a string)"),
        ("eps_string", {"layer_norm_eps": "1e-5"}, "layer_norm_eps must be a finite number"),
        ("n_layer_bool", {"n_layer": True}, "n_layer must be an integer, got true"),
        ("activation_number", {"activation": 5}, "activation must be a short string"),
        ("bias_string", {"bias": "yes"}, "bias must be true or false"),
        ("tie_list", {"tie_embeddings": [1]}, "tie_embeddings must be true or false"),
        ("extra_list", {"extra": [1, 2]}, "extra must be an object"),
        ("eps_huge_int", {"layer_norm_eps": 10**99}, "layer_norm_eps"),
    ):
        add(f"native_{name}", _write_native(p(f"native_{name}.safetensors"), _state(model), {**cfg, **change}),
            expect, "schema")
    for name, text, expect in (("list", "[1, 2]", "is [1, 2] (a list), not a json object"),
                               ("string", '"trained"', "not a json object"),
                               ("steps_string", '{"steps": "many"}', "field steps must be a non-negative integer"),
                               ("history_object", '{"history": {"a": 1}}', "field history must be a list"),
                               ("command_numbers", '{"command": [1, 2]}', "field command must be a list of strings")):
        add(f"native_training_{name}", native_raw(f"native_training_{name}", training_text=text), expect, "schema")

    def nano(name, edit, expect, group="schema", legacy=False):
        obj = _nanogpt(model)
        edit(obj)
        kw = {"_use_new_zipfile_serialization": False} if legacy else {}
        torch.save(obj, p(name + ".pt"), **kw)
        add(name, p(name + ".pt"), expect, group)

    nano("ng_bias_tensor", lambda o: o["model_args"].__setitem__("bias", torch.ones(3)),
         "bias must be true or false, got a tensor of shape (3,)")
    nano("ng_dropout_huge_int", lambda o: o["model_args"].__setitem__("dropout", 10**400),
         "dropout must be a finite number")
    nano("ng_dropout_600_digits", lambda o: o["model_args"].__setitem__("dropout", 10**600),
         "dropout must be a finite number, got an integer of about 600 digits")
    nano("ng_n_layer_600_digits", lambda o: o["model_args"].__setitem__("n_layer", 10**600),
         "n_layer is out of range, got an integer of about 600 digits")
    nano("ng_dropout_inf", lambda o: o["model_args"].__setitem__("dropout", float("inf")),
         "dropout must be a finite number")
    nano("ng_dropout_string", lambda o: o["model_args"].__setitem__("dropout", "0.1"), "dropout must be a finite number")
    nano("ng_n_layer_tensor", lambda o: o["model_args"].__setitem__("n_layer", torch.tensor(2)),
         "n_layer must be an integer, got a tensor")
    nano("ng_n_head_float", lambda o: o["model_args"].__setitem__("n_head", 2.0), "n_head must be an integer")

    # -- amplification: small files describing far more than they store ------------------------------
    big = GPTConfig(n_layer=12, n_head=16, n_embd=1024, block_size=1024, vocab_size=50304)

    def repeated_state(config, make):
        skeleton = {k: v.shape for k, v in _state_shapes(config).items()}
        return {k: make(shape) for k, shape in skeleton.items()}

    def nano_state(name, config, state, legacy=False):
        args = dict(n_layer=config.n_layer, n_head=config.n_head, n_embd=config.n_embd,
                    block_size=config.block_size, vocab_size=config.vocab_size, bias=True, dropout=0.0)
        named = {("lm_head.weight" if k == "lm_head.weight" else "transformer." + k.replace("blocks.", "h.", 1)): v
                 for k, v in state.items()}
        kw = {"_use_new_zipfile_serialization": False} if legacy else {}
        torch.save({"model": named, "model_args": args}, p(name + ".pt"), **kw)
        return p(name + ".pt")

    add("amp_stride0", nano_state("amp_stride0", big, repeated_state(big, lambda s: torch.zeros(1).expand(*s))),
        "repeats its stored values", "amplify")
    add("amp_stride0_legacy", nano_state("amp_stride0_legacy", big,
                                          repeated_state(big, lambda s: torch.zeros(1).expand(*s)), legacy=True),
        "repeats its stored values", "amplify")
    caps = GPTConfig(n_layer=2, n_head=16, n_embd=32768, block_size=4096, vocab_size=50304)
    add("amp_stride0_caps", nano_state("amp_stride0_caps", caps,
                                        repeated_state(caps, lambda s: torch.zeros(1).expand(*s))),
        "repeats its stored values", "amplify")
    one = torch.randn(64 * 256)

    def shared_view(shape):
        n = 1
        for d in shape:
            n *= d
        return one[:n].view(*shape) if n <= one.numel() else torch.zeros(1).expand(*shape)

    wide = GPTConfig(n_layer=64, n_head=2, n_embd=64, block_size=64, vocab_size=64)
    add("amp_shared_storage", nano_state("amp_shared_storage", wide, repeated_state(wide, shared_view)),
        "share storage", "amplify")
    add("amp_overlapping_strides", nano_state("amp_overlapping_strides", BASE, {
        **_state(model), "wte.weight": torch.randn(600).as_strided((512, 16), (1, 1))}),
        "repeats its stored values", "amplify")
    torch.save({"model_state_dict": {"tok_emb.weight": torch.zeros(1).expand(50257, 4096),
                                     "blocks.0.attn.in_proj_weight": torch.zeros(1).expand(3 * 4096, 4096)},
                "config": {"n_head": 8}}, p("amp_tutorial_stride0.pt"))
    add("amp_tutorial_stride0", p("amp_tutorial_stride0.pt"), "repeats its stored values", "amplify")
    folder = _hf_folder(p("amp_hf_bin_stride0"), model)
    os.remove(os.path.join(folder, "model.safetensors"))
    torch.save({"transformer.wte.weight": torch.zeros(1).expand(50257, 4096)},
               os.path.join(folder, "pytorch_model.bin"))
    add("amp_hf_bin_stride0", folder, "repeats its stored values", "amplify")
    torch.save({"w": torch.zeros(4_000_000)}, p("amp_deflated.tmp"))
    with zipfile.ZipFile(p("amp_deflated.tmp")) as zin, \
            zipfile.ZipFile(p("amp_deflated.pt"), "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    os.remove(p("amp_deflated.tmp"))
    add("amp_deflated_zip", p("amp_deflated.pt"), "torch never compresses a checkpoint", "amplify")
    for name, n_layer, expect in (("amp_tutorial_6000_layers", 6000, "builds more than 20,000 objects"),
                                  ("amp_tutorial_1100_layers", 1100, "past the 1024 layers")):
        layers = {"tok_emb.weight": torch.randn(8, 4)}
        for i in range(n_layer):
            layers.update({f"blocks.{i}.attn.in_proj_weight": torch.randn(12, 4), f"blocks.{i}.ln1.weight": torch.ones(4),
                           f"blocks.{i}.ff.net.0.weight": torch.randn(8, 4), f"blocks.{i}.ff.net.2.weight": torch.randn(4, 8)})
        torch.save({"model_state_dict": layers, "config": {"n_head": 2}}, p(name + ".pt"))
        add(name, p(name + ".pt"), expect, "amplify")
    small = torch.randn(64)
    torch.save({f"k{i}": small[:4] for i in range(24_000)}, p("amp_24000_views.pt"))
    add("amp_24000_views", p("amp_24000_views.pt"), "builds more than 20,000 objects", "amplify")
    torch.save({f"k{i}": small[:4] for i in range(24_000)}, p("amp_24000_views_legacy.pt"),
               _use_new_zipfile_serialization=False)
    add("amp_24000_views_legacy", p("amp_24000_views_legacy.pt"), "builds more than 20,000 objects", "amplify")
    for name, key, expect in (
        ("amp_tutorial_layer_digits", f"blocks.{'9' * 5000}.attn.in_proj_weight", "names layer 999999999999…"),
        ("amp_tutorial_ff_digits", f"blocks.0.ff.net.{'7' * 5000}.weight", "blocks.0.ff.net has 1 linear layers"),
    ):
        state = {"tok_emb.weight": torch.randn(8, 4), "blocks.0.attn.in_proj_weight": torch.randn(12, 4),
                 "blocks.0.ff.net.0.weight": torch.randn(8, 4), key: torch.randn(4, 8)}
        torch.save({"model_state_dict": state, "config": {"n_head": 2}}, p(name + ".pt"))
        add(name, p(name + ".pt"), expect, "amplify")

    # -- non-string keys -----------------------------------------------------------------------------------
    torch.save({0: torch.zeros(2), 1: torch.zeros(2)}, p("keys_int.pt"))
    add("keys_int", p("keys_int.pt"), "the key 0 (an integer), not a parameter name", "keys")
    torch.save({("a", 1): torch.zeros(2), "tok_emb.weight": torch.zeros(2, 2)}, p("keys_tuple.pt"))
    add("keys_tuple", p("keys_tuple.pt"), "the key ('a', 1) (a tuple)", "keys")
    nano("keys_nanogpt_int", lambda o: o["model"].__setitem__(7, torch.zeros(1)), "the key 7 (an integer)", "keys")
    nano("keys_int_outside_the_state", lambda o: o.update(  # losses by epoch, AdamW state by index: not names
        epoch_losses={0: 1.5, 1: 1.2}, optimizer={"state": {0: {"exp_avg": torch.zeros(2)}}, "param_groups": []}),
        None, "keys")
    torch.save({"model_state_dict": {3: torch.zeros(1), "tok_emb.weight": torch.zeros(4, 2),
                                     "blocks.0.attn.in_proj_weight": torch.zeros(6, 2)}, "config": {"n_head": 1}},
               p("keys_tutorial_int.pt"))
    add("keys_tutorial_int", p("keys_tutorial_int.pt"), "the key 3 (an integer)", "keys")
    folder = _hf_folder(p("keys_hf_bin_int"), model)
    os.remove(os.path.join(folder, "model.safetensors"))
    torch.save({5: torch.zeros(2)}, os.path.join(folder, "pytorch_model.bin"))
    add("keys_hf_bin_int", folder, "the key 5 (an integer)", "keys")

    # -- float8 / float4 weights ---------------------------------------------------------------------------
    save_checkpoint(model, p("float8_native.safetensors"), dtype=torch.float8_e4m3fn)
    add("float8_native", p("float8_native.safetensors"), None, "float8")
    save_checkpoint(model, p("float8_e5m2_native.safetensors"), dtype=torch.float8_e5m2)
    add("float8_e5m2_native", p("float8_e5m2_native.safetensors"), None, "float8")
    nano("float8_nanogpt", lambda o: o.__setitem__("model", {k: v.to(torch.float8_e4m3fn) for k, v in o["model"].items()}),
         None, "float8")
    state = _state(model)
    state["ln_f.weight"][3] = float("inf")
    state = {k: v.to(torch.float8_e5m2) for k, v in state.items()}
    _write_native(p("float8_inf.safetensors"), state, cfg)
    add("float8_inf", p("float8_inf.safetensors"), "ln_f.weight contains nan or inf", "float8")
    nano("float4_nanogpt", lambda o: o["model"].__setitem__(
        "_orig_mod.transformer.ln_f.weight", torch.zeros(16, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)),
        "float4_e2m1fn_x2, which cannot be converted to float32", "float8")

    # -- symbolic links ------------------------------------------------------------------------------------
    os.symlink("loop.pt", p("loop.pt"))
    add("link_self_loop", p("loop.pt"), "a symbolic link loop", "links")
    os.symlink("ping.pt", p("pong.pt"))
    os.symlink("pong.pt", p("ping.pt"))
    add("link_mutual_loop", p("ping.pt"), "a symbolic link loop", "links")
    os.symlink("gone.safetensors", p("dangling.safetensors"))
    add("link_dangling", p("dangling.safetensors"), "a symbolic link to gone.safetensors, which does not exist", "links")
    add_leaving_links(root, add, sharded, model)
    add_hostile_tokenizers(root, add, model)
    training = {"final_train_loss": float("nan"), "best": float("inf"), "worst": float("-inf"), "steps": 0}
    save_checkpoint(model, p("training_nan.safetensors"), training=training)
    add("training_nan", p("training_nan.safetensors"), None, "json")
    return out


def _state_shapes(config: GPTConfig) -> dict[str, torch.Tensor]:
    """Our parameter names and shapes for `config`, as meta tensors (nothing allocated)."""
    from transformer_viewer.model.decoder.gpt import GPT

    with torch.device("meta"):
        state = GPT(config).state_dict()
    state.pop("lm_head.weight", None)
    return state



def add_leaving_links(root: str, add, sharded, model) -> None:
    """Folders whose files are links: out of the folder (refused), and a cache snapshot's links into
    its own repository's blobs/ (loads) or into another repository's (refused)."""
    def p(*names):
        return os.path.join(root, *names)

    elsewhere = _hf_folder(p("links_elsewhere"), model)  # the files the hostile links lead to
    leaving = "outside the model folder (a model folder's files must lie inside it)"
    for name in ("config.json", "model.safetensors"):
        folder = _hf_folder(p(f"links_{name}"), model)
        os.remove(os.path.join(folder, name))
        os.symlink(os.path.join(elsewhere, name), os.path.join(folder, name))
        add(f"links_{name.split('.')[0]}_outside", folder, leaving, "links")
    folder = sharded("links_shard_outside")
    shard = os.path.join(folder, "model-00002-of-00002.safetensors")
    os.replace(shard, p("links_elsewhere", "moved-shard.safetensors"))
    os.symlink(p("links_elsewhere", "moved-shard.safetensors"), shard)
    add("links_shard_outside", folder, leaving, "links")
    folder = _hf_folder(p("links_tokenizer"), model)
    with open(p("links_elsewhere", "secret.txt"), "w", encoding="utf-8") as f:
        f.write("not for a tokenizer to read")
    os.symlink(p("links_elsewhere", "secret.txt"), os.path.join(folder, "tokenizer.json"))
    add("links_tokenizer_outside", folder, leaving, "links")
    # A nanoGPT out_dir whose ckpt.pt leads out of it: the same rule as a Hugging Face folder's files.
    torch.save(_nanogpt(model), p("links_elsewhere", "ckpt.pt"))
    os.makedirs(p("links_nanogpt_out"))
    os.symlink(p("links_elsewhere", "ckpt.pt"), p("links_nanogpt_out", "ckpt.pt"))
    add("links_nanogpt_ckpt_outside", p("links_nanogpt_out"), leaving, "links")

    # The cache's layout: models--org--name/{blobs/<hash>, snapshots/<rev>/<file> -> ../../blobs/<hash>}.
    def cached(repo, blob_repo):
        staging = _hf_folder(p(f"staging_{repo}"), model)
        snap = p("hub", f"models--org--{repo}", "snapshots", "rev0")
        os.makedirs(snap)
        blobs = p("hub", f"models--org--{blob_repo}", "blobs")
        os.makedirs(blobs, exist_ok=True)
        for name in sorted(os.listdir(staging)):
            blob = os.path.join(blobs, f"{repo}-{name}")
            os.replace(os.path.join(staging, name), blob)
            os.symlink(os.path.relpath(blob, snap), os.path.join(snap, name))
        return snap

    add("links_cache_own_blobs", cached("good", "good"), None, "links")
    os.makedirs(p("hub", "models--org--thief", "blobs"))  # its own blobs/ exist, its links lead elsewhere
    add("links_cache_other_repo_blobs", cached("thief", "victim"), "a cache snapshot may link only into its own repository's blobs/", "links")


def add_hostile_tokenizers(root: str, add, model) -> None:
    """GPT-2-layout folders with a 512-token vocabulary bringing their own tokenizer.json: a plain
    one (loads) and ones whose pre-tokenizer regex could stall the library (refused at load)."""
    from tests.helpers import tokenizers as tc

    def folder(name, pattern=None):
        path = _hf_folder(os.path.join(root, name), model)
        tc.byte_level(path)
        if pattern is not None:
            tokenizer = os.path.join(path, "tokenizer.json")
            with open(tokenizer, encoding="utf-8") as f:
                spec = json.load(f)
            spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                spec["pre_tokenizer"]]}
            with open(tokenizer, "w", encoding="utf-8") as f:
                json.dump(spec, f)
        return path

    add("tokenizer_own", folder("tokenizer_own"), None, "tokenizer")
    broken = folder("tokenizer_broken")
    with open(os.path.join(broken, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [[')
    add("tokenizer_not_json", broken, "tokenizer.json: not a tokenizer the tokenizers library can read", "tokenizer")
    config = folder("tokenizer_config_flag")
    with open(os.path.join(config, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"add_eos_token": "yes"}, f)
    add("tokenizer_config_flag", config, "add_eos_token is 'yes', not true or false", "tokenizer")
    add("tokenizer_nested_quantifiers", folder("tokenizer_nested", r"(\s+\S*)+$"),
        "repeats a group that holds a repeat (nested quantifiers)", "tokenizer")
    add("tokenizer_huge_alternation", folder("tokenizer_alternation", "|".join(f"t{i}" for i in range(300))),
        "has 300 alternatives", "tokenizer")
    add("tokenizer_long_pattern", folder("tokenizer_long", "[a-z]" * 600), "is 3,000 characters long", "tokenizer")
