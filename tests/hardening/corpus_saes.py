"""Hostile SAE files, built by code in a temporary folder (nothing binary is committed), for the
hardening tiny model (n_embd 16, 2 layers). Classes:

- shapes: tensors whose shapes lie about the config (or npz members about each other);
- values: NaN thresholds, infinite weights, integer or missing tensors, unknown tensors;
- size: huge widths, in cfg.json, a safetensors header and npz member headers (nothing behind
  them), refused before anything is allocated;
- config: a hook point that does not exist, TopK with k above the width, unsupported
  architectures, normalisations and processings, wrong types, hostile JSON;
- npz: pickled object arrays, big-endian and Fortran arrays, members that are no SAE weight,
  a file that is no zip;
- files: links out of the folder, a folder with neither layout, a missing hook point.

Each entry is a `HostileSae`: `spec` given to `load_sae` (and `--sae`) must give one ModelError
line containing `expect`. `entries()` names them without keeping the files.
"""

from __future__ import annotations

import io
import json
import os
import struct
import tempfile
import zipfile
from dataclasses import dataclass

import numpy as np
import torch
from safetensors.torch import save_file

from tests.helpers.saes import random_weights, saelens_cfg, write_npz, write_saelens

D_IN = 16
HOOK = "blocks.1.hook_resid_post"
GROUPS = ("shapes", "values", "size", "config", "npz", "files")
HUGE = 1 << 30  # features in the "size" entries: 137 GB of float32 at d_in 16


@dataclass(frozen=True)
class HostileSae:
    name: str
    spec: str
    expect: str
    group: str


def _weights(arch="standard", d_sae=24, **changes):
    w = random_weights(arch, D_IN, d_sae, seed=3)
    w.update(changes)
    return {k: v for k, v in w.items() if v is not None}


def _folder(root, name, cfg=None, weights=None, arch="standard", d_sae=24, **cfg_fields):
    cfg = cfg if cfg is not None else saelens_cfg(arch, D_IN, d_sae, HOOK, k=4, model_from_pretrained_kwargs={},
                                                  **cfg_fields)
    return write_saelens(os.path.join(root, name), cfg, weights if weights is not None else _weights(arch, d_sae))


def _raw_folder(root, name, cfg_text: str, weights=None) -> str:
    folder = os.path.join(root, name)
    os.makedirs(folder)
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        f.write(cfg_text)
    save_file({k: torch.from_numpy(v) for k, v in (weights or _weights()).items()},
              os.path.join(folder, "sae_weights.safetensors"))
    return folder


def _header_only_safetensors(path, shapes: dict[str, tuple[int, ...]]) -> None:
    """A safetensors file whose header claims `shapes` of float32, with the bytes they need missing."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)


def _npy_header(shape, descr="<f4", fortran=False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": fortran, "shape": tuple(shape)})
    return buf.getvalue()  # the magic string and the header, no data


def _npz_members(path, members: dict[str, bytes]) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name + ".npy", data)
    return str(path)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=True)
    return buf.getvalue()


def entries() -> list[tuple[str, str]]:
    """(name, expect) of every entry, the files built in a folder removed afterwards."""
    with tempfile.TemporaryDirectory() as root:
        return [(h.name, h.expect) for h in build(root)]


def build(root: str) -> list[HostileSae]:
    out: list[HostileSae] = []

    def add(name, spec, expect, group):
        out.append(HostileSae(name, spec, expect, group))

    def npz(name):
        return os.path.join(root, name, "params.npz")

    # -- shapes ------------------------------------------------------------------------------
    w = _weights()
    w["W_dec"] = w["W_dec"][:, :8].copy()
    add("decoder_shape_lie", _folder(root, "dec_lie", weights=w), "W_dec is torch.float32 [24, 8]", "shapes")
    add("config_width_lie", _folder(root, "width_lie", cfg=saelens_cfg("standard", D_IN, 30, HOOK,
                                                                       model_from_pretrained_kwargs={})),
        "needs float [16, 30]", "shapes")
    add("wrong_d_in_for_hook", _folder(root, "d_in", cfg=saelens_cfg("standard", 32, 24, HOOK),
                                       weights=random_weights("standard", 32, 24)),
        "the SAE reads 32-wide activations", "shapes")
    m = random_weights("jumprelu", D_IN, 24)
    m["threshold"] = m["threshold"][:10]
    add("npz_threshold_short", write_npz(npz("npz_short"), m) + "@" + HOOK, "threshold has shape [10]", "shapes")
    m = random_weights("standard", D_IN, 24)
    del m["W_enc"]
    add("npz_without_encoder", write_npz(npz("npz_noenc"), m) + "@" + HOOK, "no two-dimensional W_enc", "shapes")
    add("npz_empty_encoder", write_npz(npz("npz_empty"), {"W_enc": np.zeros((16, 0), np.float32)}) + "@" + HOOK,
        "W_enc is empty", "shapes")

    # -- values ------------------------------------------------------------------------------
    j = _weights("jumprelu")
    j["threshold"][3] = np.nan
    add("nan_threshold", _folder(root, "nan_thr", arch="jumprelu", weights=j), "threshold holds NaN", "values")
    m = random_weights("jumprelu", D_IN, 24)
    m["threshold"][0] = np.nan
    add("npz_nan_threshold", write_npz(npz("npz_nan"), m) + "@" + HOOK, "threshold holds NaN", "values")
    add("infinite_decoder", _folder(root, "inf_dec", weights=_weights(W_dec=np.full((24, D_IN), np.inf, np.float32))),
        "W_dec holds NaN or infinite", "values")
    add("integer_encoder", _folder(root, "int_enc", weights=_weights(W_enc=np.ones((D_IN, 24), np.int32))),
        "W_enc is torch.int32", "values")
    add("missing_bias", _folder(root, "no_bias", weights=_weights(b_enc=None)), "missing b_enc", "values")
    add("unknown_tensor", _folder(root, "extra", weights=_weights(payload=np.zeros(3, np.float32))),
        "unexpected payload", "values")
    add("scaling_factor", _folder(root, "scaled", weights=_weights(scaling_factor=np.full(24, 2.0, np.float32))),
        "finetuning scaling factor is not supported", "values")
    add("scaling_factor_shape", _folder(root, "scaled_shape",
                                        weights=_weights(scaling_factor=np.ones((2, 2), np.float32))),
        "scaling_factor has shape [2, 2]", "values")

    # -- size: headers that promise more than any machine holds -----------------------------
    add("huge_width_config", _folder(root, "huge_cfg", cfg=saelens_cfg("standard", D_IN, HUGE, HOOK,
                                                                       model_from_pretrained_kwargs={})),
        "more than the", "size")
    folder = os.path.join(root, "huge_header")
    os.makedirs(folder)
    with open(os.path.join(folder, "cfg.json"), "w") as f:
        json.dump(saelens_cfg("standard", D_IN, HUGE, HOOK), f)
    _header_only_safetensors(os.path.join(folder, "sae_weights.safetensors"),
                             {"W_enc": (D_IN, HUGE), "W_dec": (HUGE, D_IN), "b_enc": (HUGE,), "b_dec": (D_IN,)})
    add("huge_width_header", folder, "more than the", "size")
    add("huge_npz_headers", _npz_members(npz("npz_huge"), {
        "W_enc": _npy_header((D_IN, HUGE)), "W_dec": _npy_header((HUGE, D_IN)), "b_enc": _npy_header((HUGE,)),
        "b_dec": _npy_header((D_IN,))}) + "@" + HOOK, "more than the", "size")
    add("width_past_any_sae", _folder(root, "width_int", cfg=saelens_cfg("standard", D_IN, 1 << 40, HOOK) | {
        "d_sae": 10 ** 30}), "d_sae is", "size")

    # -- config ------------------------------------------------------------------------------
    add("hook_that_does_not_exist", _folder(root, "no_hook", cfg=saelens_cfg("standard", D_IN, 24, "blocks.9.hook_resid_post")),
        "does not exist in this model", "config")
    add("hook_of_another_kind", _folder(root, "odd_hook", cfg=saelens_cfg("standard", D_IN, 24, "blocks.1.ln1.hook_scale")),
        "does not exist in this model", "config")
    add("topk_k_above_width", _folder(root, "topk_k", arch="topk", cfg=saelens_cfg("topk", D_IN, 24, HOOK, k=25)),
        "TopK keeps k = 25 features of only 24", "config")
    add("topk_k_above_width_old_layout", _folder(root, "topk_k5", cfg=saelens_cfg("topk", D_IN, 24, HOOK, "5", k=99)),
        "TopK keeps k = 99", "config")
    add("topk_without_k", _folder(root, "topk_nok", cfg=saelens_cfg("topk", D_IN, 24, HOOK, "5", k=None)),
        "without activation_fn_kwargs.k", "config")
    add("unknown_architecture", _folder(root, "arch", cfg=saelens_cfg("standard", D_IN, 24, HOOK) | {
        "architecture": "matching_pursuit"}), "architecture 'matching_pursuit' is not supported", "config")
    add("unknown_activation", _folder(root, "act", cfg=saelens_cfg("standard", D_IN, 24, HOOK, "5") | {
        "activation_fn_str": "tanh-relu"}), "activation function 'tanh-relu' is not supported", "config")
    add("covariance_whitening", _folder(root, "whiten", normalize_activations="covariance_whitening"),
        "covariance_whitening' is not supported", "config")
    add("expected_average_without_factor", _folder(root, "avg", normalize_activations="expected_average_only_in"),
        "whose scaling factor its cfg.json does not hold", "config")
    add("old_bool_normalisation", _folder(root, "avg_old", cfg=saelens_cfg("standard", D_IN, 24, HOOK, "5") | {
        "normalize_activations": True}), "expected_average_only_in, whose scaling factor", "config")
    add("finetuning_flag", _folder(root, "ft", finetuning_scaling_factor=True), "finetuning scaling factor", "config")
    add("one_head", _folder(root, "head", hook_head_index=1), "hook_head_index 1", "config")
    add("reshape_kind", _folder(root, "reshape", reshape_activations="sideways"), "reshape_activations 'sideways'",
        "config")
    add("hook_name_not_text", _folder(root, "hook_int", cfg=saelens_cfg("standard", D_IN, 24, HOOK, "5") | {
        "hook_point": 12}), "hook_name is not a hook point's name", "config")
    add("no_hook_at_all", _folder(root, "hookless", cfg={k: v for k, v in saelens_cfg("standard", D_IN, 24, HOOK, "5")
                                                         .items() if k != "hook_point"}),
        "names no hook point", "config")
    add("flag_as_text", _folder(root, "flag", apply_b_dec_to_input="yes"), "apply_b_dec_to_input is 'yes'", "config")
    add("width_as_text", _folder(root, "width_text", cfg=saelens_cfg("standard", D_IN, 24, HOOK) | {"d_in": "16"}),
        "d_in is '16'", "config")
    add("metadata_not_object", _folder(root, "meta", cfg=saelens_cfg("standard", D_IN, 24, HOOK) | {"metadata": [1]}),
        "its metadata is not an object", "config")
    add("kwargs_not_object", _folder(root, "kwargs", cfg=saelens_cfg("standard", D_IN, 24, HOOK,
                                                                     model_from_pretrained_kwargs=[1])),
        "model_from_pretrained_kwargs is not an object", "config")
    add("kwarg_not_bool", _folder(root, "kwarg", cfg=saelens_cfg("standard", D_IN, 24, HOOK,
                                                                 model_from_pretrained_kwargs={"fold_value_biases": 1})),
        "model_from_pretrained_kwargs.fold_value_biases is '1'", "config")
    z = random_weights("standard", D_IN, 24)
    add("refactored_attention", _folder(root, "refactor", weights=z, cfg=saelens_cfg(
        "standard", D_IN, 24, "blocks.0.attn.hook_z", model_from_pretrained_kwargs={"refactor_factored_attn_matrices": True})),
        "refactor_factored_attn_matrices", "config")
    add("deep_json", _raw_folder(root, "deep", '{"d_in": ' + "[" * 1000 + "]" * 1000 + "}"), "nested", "config")
    add("huge_number", _raw_folder(root, "bignum", '{"d_in": 1' + "0" * 500 + "}"), "digits", "config")
    add("not_json", _raw_folder(root, "garbage", "d_in = 16"), "not valid JSON", "config")
    big = os.path.join(root, "big_cfg")
    os.makedirs(big)
    with open(os.path.join(big, "cfg.json"), "w") as f:
        f.write('{"pad": "' + "x" * (2 << 20) + '"}')
    add("oversized_cfg", big, "bytes", "config")

    # -- npz ---------------------------------------------------------------------------------
    add("npz_pickled_objects", _npz_members(npz("npz_pickle"), {
        "W_enc": _npy(np.array([{"x": 1}] * 4, dtype=object))}) + "@" + HOOK, "is stored as |O", "npz")
    add("npz_big_endian", _npz_members(npz("npz_be"), {"W_enc": _npy(np.ones((D_IN, 4), ">f4"))}) + "@" + HOOK,
        "not plain little-endian floats", "npz")
    add("npz_fortran", _npz_members(npz("npz_f"), {"W_enc": _npy(np.asfortranarray(np.ones((D_IN, 4), "<f4")))})
        + "@" + HOOK, "Fortran order", "npz")
    add("npz_stranger", _npz_members(npz("npz_stranger"), {"evil": _npy(np.ones(3, "<f4"))}) + "@" + HOOK,
        "which is no SAE weight", "npz")
    add("npz_many_members", _npz_members(npz("npz_many"), {f"W_enc{i}": b"" for i in range(40)}) + "@" + HOOK,
        "more than an SAE has", "npz")
    add("npz_bad_header", _npz_members(npz("npz_hdr"), {"W_enc": b"\x93NUMPY\x01\x00\xff\xff{garbage"}) + "@" + HOOK,
        "cannot be read", "npz")
    trunc = _npz_members(npz("npz_trunc"), {
        "W_enc": _npy_header((D_IN, 24)) + b"\0" * 8, "W_dec": _npy_header((24, D_IN)), "b_enc": _npy_header((24,)),
        "b_dec": _npy_header((D_IN,))})
    add("npz_truncated_arrays", trunc + "@" + HOOK, "an array cannot be read", "npz")
    not_zip = npz("npz_not_zip")
    os.makedirs(os.path.dirname(not_zip))
    with open(not_zip, "wb") as f:
        f.write(b"PK\x03\x04 this is not a zip archive")
    add("npz_not_a_zip", not_zip + "@" + HOOK, "not a readable .npz", "npz")

    # -- files -------------------------------------------------------------------------------
    outside = _folder(root, "outside")
    linked = os.path.join(root, "linked")
    os.makedirs(linked)
    os.symlink(os.path.join(outside, "cfg.json"), os.path.join(linked, "cfg.json"))
    os.symlink(os.path.join(outside, "sae_weights.safetensors"), os.path.join(linked, "sae_weights.safetensors"))
    add("links_out_of_the_folder", linked, "outside the model folder", "files")
    empty = os.path.join(root, "empty")
    os.makedirs(empty)
    add("folder_of_neither_layout", empty, "neither an SAELens folder", "files")
    stray = os.path.join(root, "weights.bin")
    with open(stray, "wb") as f:
        f.write(b"\0" * 16)
    add("file_of_no_kind", stray, "not an SAE file", "files")
    add("npz_without_hook", write_npz(npz("npz_nohook"), random_weights("standard", D_IN, 24)),
        "say which hook point it reads", "files")
    add("hook_against_its_cfg", _folder(root, "mismatch") + "@blocks.0.hook_mlp_out", "not blocks.0.hook_mlp_out",
        "files")
    pipe = os.path.join(root, "pipe_sae")
    os.makedirs(pipe)
    os.mkfifo(os.path.join(pipe, "cfg.json"))
    add("named_pipe_cfg", pipe, "not a regular file", "files")
    return out
