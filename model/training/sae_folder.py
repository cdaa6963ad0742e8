"""Writing a trained SAE as a SAELens 6 folder: `cfg.json` and `sae_weights.safetensors`.

The layout SAELens 6 writes and reads (`SAE.save_model`, `SAE.load_from_disk`): the
architecture's fields at the top of `cfg.json`, and where the SAE belongs (model_name,
hook_name, context_size, prepend_bos, ...) under `metadata`; the tensors W_enc (d_in, d_sae),
b_enc (d_sae,), W_dec (d_sae, d_in), b_dec (d_in,) in safetensors. The weights may be stored in
float16 to halve the file while `cfg.json` says "float32": SAELens casts what it reads to the
config's dtype, so the SAE computes in float32.

The folder is whole or absent: every file goes into a hidden folder beside the target, which is
renamed into place only once all are written. An existing folder is replaced only when asked,
and only if it holds nothing but an SAE's files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile

import torch
from safetensors.torch import save

from transformer_viewer.model.errors import ModelError
from transformer_viewer.model.files.atomic_write import write_bytes

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
LABELS_FILE = "labels.csv"
LABEL_TOKENS_FILE = "label_tokens.safetensors"
# What train-sae writes; a folder holding anything else is not replaced by --overwrite.
SAE_FILES = frozenset({CFG_FILE, WEIGHTS_FILE, LABELS_FILE, LABEL_TOKENS_FILE})
SAELENS_VERSION = "6.0.0"  # the config layout written: 6's (metadata block, architecture field)
SAVE_DTYPES = {"float32": torch.float32, "float16": torch.float16}


def saelens_config(d_in: int, d_sae: int, architecture: str, k: int, metadata: dict,
                   reshape: str = "none") -> dict:
    """cfg.json as SAELens 6's `SAEConfig.to_dict` writes it, for raw (unnormalised) activations."""
    cfg = {"d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cpu", "apply_b_dec_to_input": True,
           "normalize_activations": "none", "reshape_activations": reshape, "architecture": architecture}
    if architecture == "topk":
        cfg.update(k=k, rescale_acts_by_decoder_norm=False)
    cfg["metadata"] = {"sae_lens_version": SAELENS_VERSION, "sae_lens_training_version": SAELENS_VERSION,
                       "hook_head_index": None, "seqpos_slice": [None], "model_from_pretrained_kwargs": {},
                       **metadata}
    return cfg


def check_out_folder(out: str, overwrite: bool) -> None:
    """Said before any work: the parent must exist, and an existing `out` needs --overwrite and
    must hold only an SAE's files."""
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise ModelError(f"--out {out}: the folder {parent} does not exist; create it or choose another --out")
    if not os.access(parent, os.W_OK):
        raise ModelError(f"--out {out}: cannot write in {parent}; choose another --out")
    if not os.path.lexists(out):
        return
    if not overwrite:
        raise ModelError(f"--out {out} already exists: add --overwrite to replace it, or choose another --out")
    if os.path.islink(out) or not os.path.isdir(out):
        raise ModelError(f"--out {out} exists and is not a folder; choose another --out")
    others = sorted(set(os.listdir(out)) - SAE_FILES)
    if others:
        raise ModelError(f"--out {out} holds files that are not an SAE's ({', '.join(others[:3])}); "
                         "--overwrite replaces only an SAE folder: choose another --out")


def write_sae_folder(out: str, cfg: dict, weights: dict[str, torch.Tensor], save_dtype: str = "float32",
                     extra_files: dict[str, bytes] | None = None, overwrite: bool = False) -> str:
    """Write the folder whole (see the module's docstring); returns its absolute path."""
    if save_dtype not in SAVE_DTYPES:
        raise ModelError(f"--save-dtype must be one of {', '.join(SAVE_DTYPES)}, got {save_dtype!r}")
    check_out_folder(out, overwrite)
    out = os.path.abspath(out)
    tensors = {name: t.detach().to("cpu", SAVE_DTYPES[save_dtype]).contiguous() for name, t in weights.items()}
    files = {WEIGHTS_FILE: save(tensors, metadata={"format": "pt"}),
             CFG_FILE: (json.dumps(cfg, indent=2, allow_nan=False) + "\n").encode("utf-8"),
             **(extra_files or {})}
    parent, name = os.path.split(out)
    staging = tempfile.mkdtemp(prefix=f".{name}.", suffix=".part", dir=parent)
    old = None
    try:
        for file_name, data in files.items():
            write_bytes(os.path.join(staging, file_name), data)
        if os.path.lexists(out):
            old = tempfile.mkdtemp(prefix=f".{name}.", suffix=".old", dir=parent)
            os.rename(out, os.path.join(old, name))
        os.rename(staging, out)
        staging = None
    except BaseException as e:  # a full disk, or Ctrl-C while writing
        if old is not None and not os.path.lexists(out):
            os.rename(os.path.join(old, name), out)  # the user's folder back where it was
        if isinstance(e, OSError):
            raise ModelError(f"--out {out}: cannot write the SAE folder ({e.strerror or e}); "
                             "nothing was written") from None
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(old)
    return out
