"""The file system itself as hostile input, through the command line.

- not_regular: something that is no regular file where a file is read: a named pipe (whose
  open would wait for a writer forever) as the checkpoint, a folder's config.json, its weights,
  a shard or the shard index, the tokenizer files, the cache's refs/main (only a hint: the
  model still loads), training data or `heads --text`; /dev/zero behind a link (it never ends);
  a socket; a folder where config.json should be; `--colormap` given a path (pyqtgraph would
  read whatever file it names), where only the names pyqtgraph lists are taken.
- changing: a safetensors file as it looks half-written or rewritten: its header promising
  bytes past the file's end, or two tensors over the same bytes.
- names: a folder whose name is not UTF-8 (Linux paths are bytes) holding a valid model, which
  opens; and the name a file dialog passes on for it (undecodable bytes turned into U+FFFD),
  which names nothing and is told so.
"""

from __future__ import annotations

import json
import os
import socket
import struct

from tests.hardening.cli_cases import CliCase
from tests.hardening.corpus import _hf_folder, _model
from tests.helpers import tokenizers as tc
from tests.helpers.hardening import save_tiny
from tests.helpers.hf_hub import cache_entry, repo_dir

GROUPS = ("not_regular", "changing", "names")
PROMPT = ("--prompt", "The cat sat")


def build(root: str) -> list[CliCase]:
    os.makedirs(root, exist_ok=True)
    cases: list[CliCase] = []

    def p(*names):
        return os.path.join(root, *names)

    def add(name, group, argv, expect, env=None):
        cases.append(CliCase(name, group, tuple(argv), expect, env=env or {}))

    def info(path):
        return ("info", "--checkpoint", path)

    def predict(path):
        return ("predict", "--checkpoint", path, *PROMPT)

    def hf_folder(name, tokenizer=False):
        folder = _hf_folder(p(name), _model())
        if tokenizer:
            tc.byte_level(folder)
        return folder

    def replace_with_fifo(path):
        if os.path.lexists(path):
            os.remove(path)
        os.mkfifo(path)
        return path

    ckpt = save_tiny(p("tiny.safetensors"))

    # -- not_regular: a named pipe at every place a file is read ------------------------------------
    add("fifo_checkpoint", "not_regular", info(replace_with_fifo(p("pipe.safetensors"))),
        "a named pipe (fifo), not a regular file or folder")
    for name, expect in (("config.json", "config.json: a named pipe (fifo), not a regular file"),
                         ("model.safetensors", "model.safetensors: a named pipe (fifo), not a regular file")):
        folder = hf_folder("fifo_" + name.replace(".", "_"))
        replace_with_fifo(os.path.join(folder, name))
        add(f"fifo_{name}", "not_regular", info(folder), expect)
    folder = hf_folder("fifo_bin")
    os.remove(os.path.join(folder, "model.safetensors"))
    replace_with_fifo(os.path.join(folder, "pytorch_model.bin"))
    add("fifo_pytorch_model.bin", "not_regular", info(folder), "pytorch_model.bin: a named pipe (fifo)")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        folder = hf_folder("fifo_" + name.replace(".", "_"), tokenizer=True)
        replace_with_fifo(os.path.join(folder, name))
        add(f"fifo_{name}", "not_regular", predict(folder), f"{name}: a named pipe (fifo), not a regular file")
    for what in ("index", "shard"):
        folder = hf_folder("fifo_" + what)
        os.remove(os.path.join(folder, "model.safetensors"))
        index = os.path.join(folder, "model.safetensors.index.json")
        shard = "model-00001-of-00001.safetensors"
        if what == "index":
            replace_with_fifo(index)
            expect = "model.safetensors.index.json: a named pipe (fifo)"
        else:
            with open(index, "w", encoding="utf-8") as f:
                json.dump({"weight_map": {"transformer.wte.weight": shard}}, f)
            replace_with_fifo(os.path.join(folder, shard))
            expect = f"shard {shard} is a named pipe (fifo)"
        add(f"fifo_{what}", "not_regular", info(folder), expect)
    nano = p("nanogpt_out")
    os.makedirs(nano)
    replace_with_fifo(os.path.join(nano, "ckpt.pt"))
    add("fifo_ckpt.pt", "not_regular", info(nano), "ckpt.pt: a named pipe (fifo)")
    # refs/main only names the revision last fetched: a pipe there is ignored, the snapshot loads.
    hub = p("hub")
    cache_entry(hub, "org/piped", hf_folder("cached", tokenizer=True))
    replace_with_fifo(str(repo_dir(hub, "org/piped") / "refs" / "main"))
    add("fifo_refs_main", "not_regular", info("org/piped"), None, env={"HF_HUB_CACHE": hub})
    add("fifo_refs_main_predict", "not_regular", predict("org/piped"), None, env={"HF_HUB_CACHE": hub})
    data = replace_with_fifo(p("data.txt"))
    add("fifo_training_data", "not_regular",
        ("train", "--data", data, "--out", p("trained.safetensors"), "--steps", "1", "--device", "cpu"),
        "data.txt: a named pipe (fifo), not a regular file")
    add("fifo_heads_text", "not_regular", ("heads", "--checkpoint", ckpt, "--text", replace_with_fifo(p("text.txt"))),
        "text.txt: a named pipe (fifo), not a regular file")
    # -- not_regular: devices, sockets, folders --------------------------------------------------
    os.symlink("/dev/zero", p("zero.safetensors"))
    add("dev_zero_checkpoint", "not_regular", info(p("zero.safetensors")), "a character device")
    folder = hf_folder("dev_zero_weights")
    os.remove(os.path.join(folder, "model.safetensors"))
    os.symlink("/dev/zero", os.path.join(folder, "model.safetensors"))
    add("dev_zero_weights", "not_regular", info(folder), "a symbolic link to /dev/zero, outside the model folder")
    os.symlink("/dev/zero", p("zero.txt"))
    add("dev_zero_heads_text", "not_regular", ("heads", "--checkpoint", ckpt, "--text", p("zero.txt")),
        "a character device")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(p("sock.safetensors"))
    sock.close()  # the socket file stays on the disk
    add("socket_checkpoint", "not_regular", info(p("sock.safetensors")), "a socket, not a regular file")
    folder = hf_folder("config_folder")
    os.remove(os.path.join(folder, "config.json"))
    os.mkdir(os.path.join(folder, "config.json"))
    add("config_json_a_folder", "not_regular", info(folder), "config.json: a folder, not a regular file")
    export = ("export", "--checkpoint", ckpt, *PROMPT, "--view", "attention", "--out", p("out.png"))
    add("colormap_dev_zero", "not_regular", (*export, "--colormap", "../../../../../../../../dev/zero"),
        "unknown colormap")
    add("colormap_fifo", "not_regular", (*export, "--colormap", replace_with_fifo(p("cmap.csv"))),
        "unknown colormap")

    # -- changing: half-written or rewritten safetensors ----------------------------------------
    def raw_safetensors(name, header, data=b"\0" * 8):
        text = json.dumps(header).encode()
        with open(p(name), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data)
        return p(name)

    add("st_past_the_end", "changing", info(raw_safetensors(
        "past_end.safetensors", {"w": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}})),
        "truncated safetensors file: ")
    add("st_overlap", "changing", info(raw_safetensors(
        "overlap.safetensors", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})),
        "'a' and 'b' overlap")
    add("st_size_mismatch", "changing", info(raw_safetensors(
        "mismatch.safetensors", {"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})),
        "shape [3] of bf16 needs 6 bytes, its data_offsets span 8")

    # -- names: a folder whose name is not UTF-8 -------------------------------------------------
    undecodable = os.fsdecode(os.path.join(os.fsencode(root), b"mod\xff\xfe"))
    os.makedirs(undecodable)
    native = save_tiny(os.path.join(undecodable, "tiny.safetensors"))
    add("non_utf8_native_info", "names", info(native), None)
    add("non_utf8_native_predict", "names", predict(native), None)
    folder = os.path.join(undecodable, "hf\xe9")
    os.rename(hf_folder("moved", tokenizer=True), folder)  # the tokenizers library cannot save there itself
    add("non_utf8_hf_folder", "names", predict(folder), None)
    add("dialog_name_of_non_utf8", "names", info(native.replace("\udcff\udcfe", "\ufffd\ufffd")),
        "its name holds a character that stands for bytes that are not utf-8")
    return cases
