"""What a checkpoint says about itself, made hostile: rotary parameters of the wrong type or
making a divisor zero (YaRN in every spelling, Ministral 3's published form included), special-
token ids no vocabulary has, torch pickles holding tensors that are not dense CPU tensors
(sparse, meta, quantized, nested), tutorial state dicts whose tensors do not fit one model, shards
that hold tensors the index puts elsewhere, and values that overflow or underflow float32, in the
config or only in what the model computes. Each is refused in one line; the hostile-looking
valid ones (a DeepSeek-style YaRN config, an index naming one shard two ways, a model of large
finite weights under `info`) load."""

from __future__ import annotations

import json
import math
import os

import torch
from safetensors.torch import load_file, save_file

from tests.hardening.cli_cases import CliCase
from tests.helpers import hf_family_models as fm
from tests.helpers.hardening import TINY
from transformer_viewer.model.checkpoints.checkpoint import save_checkpoint
from transformer_viewer.model.checkpoints.formats import native
from transformer_viewer.model.decoder.gpt import GPT

GROUPS = ("rope", "special_ids", "pickled_tensors", "tutorial", "shards", "non_finite")
YARN = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 32}
PROMPT = "The cat sat on the mat"


def _info(path: str) -> tuple[str, ...]:
    return ("info", path)


def _edit_json(path: str, edit) -> None:
    with open(path) as f:
        data = json.load(f)
    edit(data)
    with open(path, "w") as f:
        json.dump(data, f)


def family_folder(root: str, name: str, family: str = "smollm_tied", edit=None, published: bool = False) -> str:
    """A tiny saved model of `family`, with a tokenizer.json that fits it (so what fails is what
    the case is about), whose config.json (in its published form) gets `edit`."""
    folder = os.path.join(root, name)
    fm.save_with_tokenizer(family, folder)
    if published:
        fm.published_form(folder)
    if edit is not None:
        _edit_json(os.path.join(folder, "config.json"), edit)
    return folder


def _rope(params: dict):
    return lambda cfg: cfg.update(rope_parameters=params)


def rope_cases(root: str) -> list[CliCase]:
    def yarn(name, expect, top=None, **params):
        folder = family_folder(root, name, edit=lambda c: c.update(
            rope_parameters={k: v for k, v in {**YARN, **params}.items() if v is not None}, **(top or {})))
        return CliCase(name, "rope", _info(folder), expect)

    def ministral3_published(cfg):
        cfg["rope_scaling"]["mscale"] = "1"

    def mistral3_published(cfg):  # the multimodal checkpoint: Ministral 3's decoder in text_config
        cfg["text_config"]["rope_scaling"]["original_max_position_embeddings"] = "16384"

    cases = [
        yarn("yarn_mscale_string", "mscale must be a number of 0 or more", mscale="1.0", mscale_all_dim=1.0),
        yarn("yarn_mscale_all_dim_list", "mscale_all_dim must be a number of 0 or more", mscale=1.0,
             mscale_all_dim=[1]),
        # 0.1 * -10 * ln(e) + 1 == 0.0 exactly: the quotient of the two scales divided by zero.
        yarn("yarn_mscale_all_dim_zero_divisor", "mscale_all_dim must be a number of 0 or more", factor=math.e,
             mscale=1.0, mscale_all_dim=-10.0),
        # No factor: it is max_position_embeddings / original_max_position_embeddings.
        yarn("yarn_original_string", "original_max_position_embeddings must be a positive integer", factor=None,
             original_max_position_embeddings="32"),
        yarn("yarn_original_zero", "original_max_position_embeddings must be a positive integer", factor=None,
             original_max_position_embeddings=0),
        yarn("yarn_top_level_original_float", "original_max_position_embeddings must be a positive integer",
             top={"original_max_position_embeddings": 32.5}),
        yarn("yarn_truncate_string", "truncate must be true or false", truncate="no"),
        yarn("yarn_beta_fast_string", "beta_fast must be a positive number", beta_fast="32"),
        CliCase("ministral3_published_mscale_string", "rope", _info(family_folder(
            root, "ministral3_published_mscale_string", "ministral3", ministral3_published, published=True)),
                "mscale must be a number of 0 or more"),
        CliCase("mistral3_published_original_string", "rope", _info(family_folder(
            root, "mistral3_published_original_string", "mistral3", mistral3_published, published=True)),
                "original_max_position_embeddings must be a positive integer"),
        CliCase("llama3_low_freq_string", "rope", _info(family_folder(
            root, "llama3_low_freq_string", edit=_rope({**fm.LLAMA3, "low_freq_factor": "1"}))),
                "low_freq_factor must be a positive number"),
        CliCase("gemma3_local_base_string", "rope", _info(family_folder(
            root, "gemma3_local_base_string", "gemma3", lambda c: c.update(rope_local_base_freq="10000"),
            published=True)), "rope_local_base_freq must be a positive number"),
        CliCase("neox_rotary_base_string", "rope", _info(family_folder(
            root, "neox_rotary_base_string", "pythia", lambda c: c.update(rotary_emb_base=[1e4]), published=True)),
                "rotary_emb_base must be a positive number"),
        # DeepSeek-style scales, equal: an attention factor of exactly 1. Valid.
        CliCase("yarn_deepseek_scales", "rope", _info(family_folder(
            root, "yarn_deepseek_scales", "qwen3", _rope({**fm.YARN, "mscale": 0.707, "mscale_all_dim": 0.707}))),
                None),
    ]
    return cases


def special_id_cases(root: str) -> list[CliCase]:
    def generation(name, value, expect, key="bos_token_id"):
        folder = family_folder(root, name)
        _edit_json(os.path.join(folder, "generation_config.json"), lambda g: g.update({key: value}))
        return CliCase(name, "special_ids", ("predict", folder, "--prompt", PROMPT), expect)

    def config_json(name, value, expect, key="bos_token_id"):
        folder = family_folder(root, name, edit=lambda c: c.update({key: value}))
        return CliCase(name, "special_ids", _info(folder), expect)

    return [
        generation("generation_bos_30_digits", 10**30, "bos_token_id is an integer of about 31 digits, outside the "
                   "tokenizer's vocabulary"),
        generation("generation_eos_list_30_digits", [2, 10**30], "eos_token_id is an integer of about 31 digits",
                   key="eos_token_id"),
        generation("generation_bos_past_vocab", 10_000, "bos_token_id is 10000, outside the tokenizer's vocabulary"),
        generation("generation_bos_negative", -3, "bos_token_id is -3, outside"),
        generation("generation_bos_string", "1", "bos_token_id must be a token id (an integer)"),
        generation("generation_eos_float", 2.0, "eos_token_id must be a token id (an integer)", key="eos_token_id"),
        config_json("config_bos_30_digits", 10**30, "bos_token_id is an integer of about 31 digits, outside any "
                    "vocabulary"),
        config_json("config_eos_bool", True, "eos_token_id must be a token id", key="eos_token_id"),
    ]


# -- torch pickles -----------------------------------------------------------------------------
def _tiny_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(TINY).eval()


def _nanogpt(model: GPT) -> dict:
    c = model.config
    state = {("lm_head.weight" if k == "lm_head.weight" else "transformer." + k.replace("blocks.", "h.", 1)):
             v.detach().clone() for k, v in model.state_dict().items()}
    args = dict(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, block_size=c.block_size, bias=c.bias,
                vocab_size=c.vocab_size, dropout=0.0)
    return {"model": state, "model_args": args, "iter_num": 1}


def tutorial_state(C: int = 16, V: int = 64) -> dict:
    torch.manual_seed(0)
    return {"tok_emb.weight": torch.randn(V, C), "pos_emb.weight": torch.randn(32, C),
            "blocks.0.ln1.weight": torch.ones(C), "blocks.0.ln1.bias": torch.zeros(C),
            "blocks.0.ln2.weight": torch.ones(C), "blocks.0.ln2.bias": torch.zeros(C),
            "blocks.0.attn.in_proj_weight": torch.randn(3 * C, C), "blocks.0.attn.in_proj_bias": torch.zeros(3 * C),
            "blocks.0.attn.out_proj.weight": torch.randn(C, C), "blocks.0.attn.out_proj.bias": torch.zeros(C),
            "blocks.0.ff.net.0.weight": torch.randn(4 * C, C), "blocks.0.ff.net.0.bias": torch.zeros(4 * C),
            "blocks.0.ff.net.2.weight": torch.randn(C, 4 * C), "blocks.0.ff.net.2.bias": torch.zeros(C),
            "ln_f.weight": torch.ones(C), "ln_f.bias": torch.zeros(C), "head.weight": torch.randn(V, C)}


def save_tutorial(path: str, state: dict) -> str:
    torch.save({"model_state_dict": state, "config": {"n_head": 2}}, path)
    return path


def _sparse(t: torch.Tensor) -> torch.Tensor:
    return t.to_sparse()


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def _quantized(t: torch.Tensor) -> torch.Tensor:
    return torch.quantize_per_tensor(t.float(), 0.1, 0, torch.qint8)


def _nested(t: torch.Tensor) -> torch.Tensor:
    return torch.nested.nested_tensor(list(t[:2]))


def pickled_tensor_cases(root: str) -> list[CliCase]:
    import warnings

    cases = []

    def nanogpt(name, key, make, expect, where="model"):
        obj = _nanogpt(_tiny_model())
        target = obj[where] if where == "model" else obj.setdefault(where, {})
        target[key] = make(obj["model"]["transformer.wte.weight"])
        path = os.path.join(root, name + ".pt")
        torch.save(obj, path)
        cases.append(CliCase(name, "pickled_tensors", _info(path), expect))

    def tutorial(name, key, make, expect):
        state = tutorial_state()
        state[key] = make(state[key])
        cases.append(CliCase(name, "pickled_tensors", _info(save_tutorial(os.path.join(root, name + ".pt"), state)),
                             expect))

    def pytorch_bin(name, key, make, expect):
        folder = family_folder(root, name)
        weights = os.path.join(folder, "model.safetensors")
        state = load_file(weights)
        os.remove(weights)
        state[key] = make(state[key])
        torch.save(state, os.path.join(folder, "pytorch_model.bin"))
        cases.append(CliCase(name, "pickled_tensors", ("predict", folder, "--prompt", PROMPT), expect))

    with warnings.catch_warnings():  # sparse CSR, quantized and nested tensors are each "beta" or deprecated
        warnings.simplefilter("ignore")
        wte = "transformer.wte.weight"
        nanogpt("nanogpt_sparse_embedding", wte, _sparse, "is a sparse tensor (layout sparse_coo)")
        nanogpt("nanogpt_meta_embedding", wte, _meta, "is a meta tensor")
        nanogpt("nanogpt_quantized_embedding", wte, _quantized, "is a quantized tensor (qint8)")
        nanogpt("nanogpt_nested_embedding", wte, _nested, "is a nested tensor")
        nanogpt("nanogpt_complex_embedding", wte, lambda t: t.to(torch.complex64), "tensor of dtype complex64")
        nanogpt("nanogpt_sparse_in_optimizer", "exp_avg", _sparse, "is a sparse tensor", where="optimizer")
        tutorial("tutorial_sparse_head", "head.weight", _sparse, "is a sparse tensor (layout sparse_coo)")
        tutorial("tutorial_sparse_csr_head", "head.weight", lambda t: t.to_sparse_csr(),
                 "is a sparse tensor (layout sparse_csr)")
        tutorial("tutorial_meta_ln", "blocks.0.ln1.weight", _meta, "is a meta tensor")
        pytorch_bin("pytorch_bin_sparse", "model.embed_tokens.weight", _sparse, "is a sparse tensor")
        pytorch_bin("pytorch_bin_meta", "model.norm.weight", _meta, "is a meta tensor")
        pytorch_bin("pytorch_bin_quantized", "model.layers.0.mlp.up_proj.weight", _quantized, "is a quantized tensor")
    return cases


def tutorial_cases(root: str) -> list[CliCase]:
    def tutorial(name, edit, expect):
        state = tutorial_state()
        edit(state)
        return CliCase(name, "tutorial", _info(save_tutorial(os.path.join(root, name + ".pt"), state)), expect)

    def separate_qkv(k_shape):
        def edit(s):
            s.pop("blocks.0.attn.in_proj_weight")
            s.update({"blocks.0.attn.q_proj_weight": torch.randn(16, 16), "blocks.0.attn.k_proj_weight":
                      torch.randn(*k_shape), "blocks.0.attn.v_proj_weight": torch.randn(16, 16)})
        return edit

    def put(key, value):
        return lambda s: s.__setitem__(key, value)

    return [
        tutorial("tutorial_qkv_mismatched", separate_qkv((16, 8)),
                 "shape mismatch for blocks.0.attn.k_proj_weight: expected (16, 16), found (16, 8)"),
        tutorial("tutorial_qkv_transposed_k", separate_qkv((8, 32)), "shape mismatch for blocks.0.attn.k_proj_weight"),
        tutorial("tutorial_ln_weight_0d", put("blocks.0.ln1.weight", torch.tensor(1.0)),
                 "shape mismatch for blocks.0.ln1.weight: expected (16,), found ()"),
        # A missing bias is filled with zeros of the weight's length: a 0-d weight has none.
        tutorial("tutorial_ln_weight_0d_no_bias", lambda s: (s.__setitem__("blocks.0.ln2.weight", torch.tensor(1.0)),
                                                             s.pop("blocks.0.ln2.bias")),
                 "shape mismatch for blocks.0.ln2.weight: expected (16,), found ()"),
        tutorial("tutorial_ln_f_bias_0d", put("ln_f.bias", torch.tensor(0.0)), "shape mismatch for ln_f.bias"),
        tutorial("tutorial_in_proj_short", put("blocks.0.attn.in_proj_weight", torch.randn(32, 16)),
                 "shape mismatch for blocks.0.attn.in_proj_weight: expected (48, 16)"),
        tutorial("tutorial_in_proj_bias_0d", put("blocks.0.attn.in_proj_bias", torch.tensor(0.0)),
                 "shape mismatch for blocks.0.attn.in_proj_bias"),
        tutorial("tutorial_ff_widths_disagree", put("blocks.0.ff.net.2.weight", torch.randn(16, 48)),
                 "shape mismatch for blocks.0.ff.net.2.weight: expected (16, 64)"),
        tutorial("tutorial_head_bias_0d", put("head.bias", torch.tensor(1.0)), "shape mismatch for head.bias"),
        tutorial("tutorial_head_narrow", put("head.weight", torch.randn(64, 8)), "shape mismatch for head.weight"),
    ]


# -- shards ------------------------------------------------------------------------------------
def sharded_folder(root: str, name: str, place, pickled: bool = False) -> str:
    """A tiny Llama folder split into two shards: `place(state, shards, weight_map)` puts the
    tensors (shards: two dicts) and writes the index's weight_map."""
    folder = family_folder(root, name)
    weights = os.path.join(folder, "model.safetensors")
    state = load_file(weights)
    os.remove(weights)
    ext = "bin" if pickled else "safetensors"
    files = [f"model-0000{i}-of-00002.{ext}" for i in (1, 2)]
    shards: list[dict] = [{}, {}]
    weight_map: dict[str, str] = {}
    for i, key in enumerate(sorted(state)):
        shards[i % 2][key] = state[key]
        weight_map[key] = files[i % 2]
    place(state, shards, weight_map, files)
    for shard, file in zip(shards, files, strict=True):
        path = os.path.join(folder, file)
        if pickled:
            torch.save(shard, path)
        else:
            save_file(shard, path, metadata={"format": "pt"})
    index = "pytorch_model.bin.index.json" if pickled else "model.safetensors.index.json"
    with open(os.path.join(folder, index), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return folder


EMBED = "model.embed_tokens.weight"


def stale_copy(state, shards, weight_map, files):
    """The index puts the embedding in shard 1; shard 2 holds a zeroed copy of it too."""
    first = files.index(weight_map[EMBED])
    shards[1 - first][EMBED] = torch.zeros_like(state[EMBED])


def unlisted(state, shards, weight_map, files):
    shards[0]["model.layers.0.self_attn.extra.weight"] = torch.zeros(4)


def _swapped(state, shards, weight_map, files):
    weight_map[EMBED] = files[1 - files.index(weight_map[EMBED])]


def _two_names(state, shards, weight_map, files):
    """Valid: half the index names shard 1 as ./model-00001-of-00002.safetensors."""
    for i, key in enumerate(sorted(weight_map)):
        if weight_map[key] == files[0] and i % 4 == 0:
            weight_map[key] = "./" + files[0]


def shard_cases(root: str) -> list[CliCase]:
    def case(name, place, expect, pickled=False):
        folder = sharded_folder(root, name, place, pickled)
        return CliCase(name, "shards", ("predict", folder, "--prompt", PROMPT), expect)

    return [
        case("shard_stale_duplicate", stale_copy, "holds model.embed_tokens.weight, which the index puts in"),
        case("shard_stale_duplicate_pickled", stale_copy, "holds model.embed_tokens.weight, which the index puts in",
             pickled=True),
        case("shard_tensor_not_in_index", unlisted, "which the index does not list"),
        case("shard_index_names_other_shard", _swapped, "holds model.embed_tokens.weight, which the index puts in"),
        case("shard_one_file_two_names", _two_names, None),
    ]


# -- values float32 cannot hold ----------------------------------------------------------------
def huge_weights(path: str) -> str:
    """A checkpoint of finite weights whose MLPs' are all 3e38: the first MLP's output overflows
    float32, and everything after it (the next layer's attention, the logits) is NaN."""
    model = _tiny_model()
    with torch.no_grad():
        for block in model.blocks:
            block.mlp.c_fc.weight.fill_(3e38)
            block.mlp.c_proj.weight.fill_(3e38)
    save_checkpoint(model, path)
    return path


def native_with_config(path: str, **changes) -> str:
    """Our own format, its config metadata edited (GPTConfig itself would refuse the values)."""
    model = _tiny_model()
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    config = {**model.config.to_dict(), **changes}
    save_file(state, path, metadata={"format": native.FORMAT_TAG, "config": json.dumps(config), "tokenizer": "gpt2",
                                     "training": "{}"})
    return path


def non_finite_cases(root: str) -> list[CliCase]:
    huge = huge_weights(os.path.join(root, "huge_weights.safetensors"))
    out = os.path.join(root, "huge_weights.png")

    def config(name, edit, expect, family="smollm_tied"):
        folder = family_folder(root, name, family, edit)
        return CliCase(name, "non_finite", ("predict", folder, "--prompt", PROMPT), expect)

    return [
        config("rope_linear_factor_1e-300", _rope({"rope_type": "linear", "rope_theta": 1e4, "factor": 1e-300}),
               "factor must be a number within float32's range"),
        config("rope_yarn_factor_1e-300", _rope({**YARN, "factor": 1e-300}), "factor must be a number within float32"),
        config("rope_theta_1e39", _rope({"rope_type": "default", "rope_theta": 1e39}),
               "rope_theta must be a positive number within float32's range"),
        config("gemma2_final_softcap_1e-300", lambda c: c.update(final_logit_softcapping=1e-300),
               "final_logit_softcapping: 1e-300 underflows float32", family="gemma2"),
        config("gemma2_attn_softcap_1e39", lambda c: c.update(attn_logit_softcapping=1e39),
               "attn_logit_softcapping: 1e+39 overflows float32", family="gemma2"),
        config("rms_norm_eps_1e-300", lambda c: c.update(rms_norm_eps=1e-300), "rms_norm_eps: 1e-300 underflows"),
        CliCase("native_logit_softcap_1e-300", "non_finite", ("predict", native_with_config(
            os.path.join(root, "softcap.safetensors"), logit_softcap=1e-300), "--prompt", PROMPT),
                "logit_softcap: 1e-300 underflows float32"),
        CliCase("native_eps_5e-39", "non_finite", ("predict", native_with_config(
            os.path.join(root, "eps.safetensors"), layer_norm_eps=5e-39), "--prompt", PROMPT),
                "layer_norm_eps: 5e-39 underflows float32"),
        CliCase("huge_weights_predict", "non_finite", ("predict", huge, "--prompt", PROMPT),
                "next-token probabilities are not finite"),
        CliCase("huge_weights_scan", "non_finite", ("scan", huge, "--prompt", PROMPT, "--no-progress"),
                "are not finite"),
        CliCase("huge_weights_heads", "non_finite", ("heads", huge), "head scores are not finite"),
        CliCase("huge_weights_export", "non_finite", ("export", "--checkpoint", huge, "--prompt", PROMPT,
                                                      "--out", out), "are not finite"),
        # info runs no forward: the weights are finite, so it describes the model.
        CliCase("huge_weights_info", "non_finite", _info(huge), None),
    ]


def build(root: str) -> list[CliCase]:
    os.makedirs(root, exist_ok=True)
    cases = []
    for group, make in (("rope", rope_cases), ("special_ids", special_id_cases),
                        ("pickled_tensors", pickled_tensor_cases), ("tutorial", tutorial_cases),
                        ("shards", shard_cases), ("non_finite", non_finite_cases)):
        folder = os.path.join(root, group)
        os.makedirs(folder, exist_ok=True)
        cases += make(folder)
    return cases
