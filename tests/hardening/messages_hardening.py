"""Triggers of the messages that bound hostile files and guard writes: the JSON bounds, the
schemas, what tensors may describe, the shard index, symbolic links, float8/float4 weights and
writes onto a full disk. Each builds the smallest file that produces its message."""

from __future__ import annotations

import errno
import json
import os
import struct
import zipfile

import torch
from safetensors.torch import save_file

from tests.hardening.corpus import BASE, _hf_folder, _model, _nanogpt, _native_meta, _state
from tests.hardening.message_case import Case, raised
from transformer_viewer.model.checkpoints.checkpoint import load_checkpoint, save_checkpoint
from transformer_viewer.model.decoder.gpt import GPT
from transformer_viewer.model.errors import CheckpointError
from transformer_viewer.viewer import export as ex


def load(path):
    return raised(lambda: load_checkpoint(str(path)), CheckpointError)


def raw_safetensors(ctx, header: str, name="h.safetensors", data=b"\0" * 4):
    path = ctx.tmp / name
    path.write_bytes(struct.pack("<Q", len(header.encode())) + header.encode() + data)
    return path


def config_json(ctx, text: str):
    folder = _hf_folder(str(ctx.tmp / "hf"), _model())
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        f.write(text)
    return load(folder)


def native_with(ctx, config=None, training="{}"):
    meta = _native_meta(config or BASE.to_dict())
    meta["training"] = training
    path = ctx.tmp / "n.safetensors"
    save_file(_state(_model()), str(path), metadata=meta)
    return load(path)


def nano_with(ctx, edit):
    obj = _nanogpt(_model())
    edit(obj)
    torch.save(obj, ctx.tmp / "ckpt.pt")
    return load(ctx.tmp / "ckpt.pt")


def sharded(ctx, weight_map: dict | str, files=()):
    folder = ctx.tmp / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16,
                                                    "n_positions": 64, "vocab_size": 512}))
    for name, content in files:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    text = weight_map if isinstance(weight_map, str) else json.dumps({"weight_map": weight_map})
    (folder / "model.safetensors.index.json").write_text(text)
    return load(folder)


def deflated_zip(ctx):
    plain = ctx.tmp / "plain.pt"
    torch.save({"w": torch.zeros(1_000_000)}, plain)
    packed = ctx.tmp / "packed.pt"
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    return load(packed)


def many_views(ctx):
    base = torch.zeros(8)
    torch.save({f"k{i}": base[:2] for i in range(10_001)}, ctx.tmp / "views.pt")  # two builds per tensor
    return load(ctx.tmp / "views.pt")


def shared_storage(ctx):
    flat = torch.randn(1 << 16)
    torch.save({f"w{i}": flat.view(256, 256) for i in range(40)}, ctx.tmp / "shared.pt")
    return load(ctx.tmp / "shared.pt")


def too_many_parameters(ctx):
    huge = {**BASE.to_dict(), "n_embd": 32768, "n_head": 2, "vocab_size": 50257}  # about 26 billion
    return native_with(ctx, config=huge)


def tutorial_layer_past_the_cap(ctx):
    state = {"tok_emb.weight": torch.randn(8, 4), "blocks.0.attn.in_proj_weight": torch.randn(12, 4),
             "blocks." + "9" * 5000 + ".ln1.weight": torch.ones(4)}
    torch.save(state, ctx.tmp / "t.pt")
    return raised(lambda: load_checkpoint(str(ctx.tmp / "t.pt"), n_head=2), CheckpointError)


def million_objects(ctx):
    torch.save({"x": list(range(1_000_001))}, ctx.tmp / "o.pt")
    return load(ctx.tmp / "o.pt")


def symlink(ctx, target):
    link = ctx.tmp / "link.safetensors"
    os.symlink(target, link)
    return load(link)


def full_disk(ctx):
    real_write = os.write

    def full_after_half(fd, data):
        n = len(data) // 2
        if n:
            return real_write(fd, bytes(data[:n]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    ctx.mp.setattr(os, "write", full_after_half)
    return raised(lambda: save_checkpoint(GPT(BASE), str(ctx.tmp / "m.safetensors")), CheckpointError)


def qt_widget():
    from PySide6.QtWidgets import QApplication, QWidget

    QApplication.instance() or QApplication([])
    widget = QWidget()
    widget.resize(40, 30)
    return widget


def png_not_encoded(ctx):
    from PySide6.QtGui import QImage

    widget = qt_widget()
    ctx.mp.setattr(QImage, "save", lambda *_a: False)
    return raised(lambda: ex.export_png(widget, ctx.tmp / "a.png"), ex.ExportError)


def svg_not_rendered(ctx):
    from PySide6.QtGui import QPainter

    widget = qt_widget()
    ctx.mp.setattr(QPainter, "begin", lambda *_a: False)
    return raised(lambda: ex.export_svg(widget, ctx.tmp / "a.svg"), ex.ExportError)


HF_CONFIG = '{"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16, "n_positions": 64, "vocab_size": 512%s}'
ENTRY = '"t%d": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}'

CASES = [
    # -- untrusted JSON ----------------------------------------------------------------------------------
    Case("config.json nested 1,000 deep", lambda c: config_json(c, HF_CONFIG % (', "x": ' + "[" * 1000 + "]" * 1000)),
         "config.json: JSON nested 1001 levels deep, more than the 64 a real file has; restore the model's"),
    Case("config.json with a 5,000-digit integer", lambda c: config_json(c, HF_CONFIG % (', "n_ctx": 1' + "0" * 5000)),
         "a JSON number of 5001 digits, more than any real value has (100)"),
    Case("config.json with 1e400", lambda c: config_json(c, HF_CONFIG % ', "resid_pdrop": 1e400'),
         "the number 1e400 is out of range for a float"),
    Case("config.json with NaN", lambda c: config_json(c, HF_CONFIG % ', "layer_norm_epsilon": NaN'),
         "NaN where a finite number is expected"),
    Case("config.json of 17 MB", lambda c: config_json(c, HF_CONFIG % (" " * (17 << 20))),
         "bytes, more than the 16 MiB such a file can be"),
    Case("safetensors header of 17 MB", lambda c: load(raw_safetensors(
        c, '{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}' + " " * (17 << 20) + "}")),
        "its safetensors header is 17,825,853 bytes, more than the 16 MiB"),
    Case("safetensors header of 20,001 tensors", lambda c: load(raw_safetensors(
        c, "{" + ", ".join(ENTRY % i for i in range(20_001)) + "}", data=b"")),
        "its safetensors header lists 20,001 tensors, more than any model has (20,000)"),
    # -- schemas -----------------------------------------------------------------------------------------
    Case("native dropout as a string", lambda c: native_with(c, {**BASE.to_dict(), "dropout": "0.1"}),
         "bad config: config field dropout must be a finite number, got '0.1' (a string)"),
    Case("native training record a list", lambda c: native_with(c, training="[1, 2]"),
         "its 'training' metadata is [1, 2] (a list), not a JSON object; re-save it with save_checkpoint"),
    Case("native training steps a string", lambda c: native_with(c, training='{"steps": "ten"}'),
         "field steps must be a non-negative integer, got 'ten' (a string)"),
    Case("nanoGPT bias a tensor", lambda c: nano_with(c, lambda o: o["model_args"].__setitem__("bias", torch.ones(2))),
         "model_args bias must be true or false, got a tensor of shape (2,)"),
    Case("nanoGPT n_layer of 600 digits", lambda c: nano_with(c, lambda o: o["model_args"].__setitem__(
        "n_layer", 10**600)), "config field n_layer is out of range, got an integer of about 600 digits"),
    Case("state dict with an int key", lambda c: nano_with(c, lambda o: o["model"].__setitem__(3, torch.ones(2))),
         "holds a dict with the key 3 (an integer), not a parameter name"),
    Case("tutorial layer index past the cap", tutorial_layer_past_the_cap,
         "a key names layer 999999999999…, past the 1024 layers a model can have"),
    # -- what tensors may describe ------------------------------------------------------------------------
    Case("stride-0 tensor", lambda c: nano_with(c, lambda o: o["model"].__setitem__(
        "_orig_mod.transformer.wte.weight", torch.zeros(1).expand(512, 16))),
        "tensor model._orig_mod.transformer.wte.weight repeats its stored values (shape (512, 16), strides (0, 0)"),
    Case("forty names for one storage", shared_storage, "its tensors share storage: they describe 10,485,760 bytes"),
    Case("too many parameters", too_many_parameters, "as float32, more than fits in this machine's memory"),
    Case("a deflated torch zip", deflated_zip, "torch never compresses a checkpoint"),
    Case("a pickle of 10,001 views", many_views, "its pickle builds more than 20,000 objects"),
    Case("a pickle of a million objects", million_objects,
         "holds more than 1,000,000 objects, which no model checkpoint does"),
    Case("float4 weights", lambda c: nano_with(c, lambda o: o["model"].__setitem__(
        "_orig_mod.transformer.ln_f.weight", torch.zeros(16, dtype=torch.uint8).view(torch.float4_e2m1fn_x2))),
        "has dtype float4_e2m1fn_x2, which cannot be converted to float32"),
    # -- shard indexes -------------------------------------------------------------------------------------
    Case("shard index naming 2,000 files", lambda c: sharded(c, {f"t{i}": f"s{i}.safetensors" for i in range(2000)}),
         "names 2,000 shard files, more than any model has (1024)"),
    Case("shard index without a weight_map", lambda c: sharded(c, '{"metadata": {}}'),
         "not a valid shard index (it needs a weight_map from tensor names to file names)"),
    Case("shard outside the folder", lambda c: sharded(c, {"a": "../elsewhere.safetensors"}),
         "shard ../elsewhere.safetensors refused: outside the checkpoint folder"),
    Case("config.json named as a shard", lambda c: sharded(c, {"a": "config.json"}),
         "shard config.json is not a weights file (found JSON text starting"),
    # -- links and writes ------------------------------------------------------------------------------------
    Case("a symbolic link loop", lambda c: symlink(c, "link.safetensors"), "a symbolic link loop"),
    Case("a dangling symbolic link", lambda c: symlink(c, "gone.safetensors"),
         "a symbolic link to gone.safetensors, which does not exist"),
    Case("save_checkpoint on a full disk", full_disk, "No space left on device; free some disk space"),
    Case("PNG Qt cannot encode", png_not_encoded, "Qt could not encode the 40x30 image as PNG"),
    Case("SVG Qt cannot render", svg_not_rendered, "Qt could not render the 40x30 view as SVG"),
]

