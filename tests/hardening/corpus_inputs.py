"""Inputs whose size the user (or a file) chooses: compressed training data that expands past any
corpus, `heads --text` with too many or too long passages, prompts that would compute for minutes
on a config claiming a huge context, and `train --resume` onto a checkpoint whose training record
is malformed. Each is refused in one line before the work or the memory it asks for (or, for the
valid inputs among them, runs), and a checkpoint --resume refuses is left as it was."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import struct
import zlib

from safetensors import safe_open
from safetensors.torch import save_file

from tests.hardening.cli_cases import CliCase
from tests.helpers.hardening import save_tiny
from transformer_viewer.model.decoder.config import GPTConfig

GROUPS = ("compressed", "heads_text", "prompt_size", "train_record")
TRAIN_FLAGS = ("--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--steps", "2",
               "--eval-every", "1", "--device", "cpu")
TEXT = b"The cat sat on the mat. The dog sat on the log. "
STREAM_TEXT = 16 << 20  # one xz stream of this much text, compressed once and repeated
# A model that claims 2^20 positions (rotary: no table to allocate), small in every other way.
HUGE_CONTEXT = GPTConfig(n_layer=4, n_head=16, n_embd=64, block_size=1 << 20, positional="rotary", norm="rmsnorm",
                         mlp="gated", activation="silu", bias=False)
CONTEXT_32K = GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=1 << 15, positional="rotary", norm="rmsnorm",
                        mlp="gated", activation="silu", bias=False)
PROMPT_BYTES = 127 << 10


def huge_dictionary_xz(data: bytes) -> bytes:
    """A valid .xz whose block header asks for a 4 GiB dictionary (LZMA2 property 40): the
    header's CRC32 recomputed, so only the size of the dictionary is wrong."""
    x = bytearray(lzma.compress(data, format=lzma.FORMAT_XZ, filters=[{"id": lzma.FILTER_LZMA2, "dict_size": 4096}]))
    size = (x[12] + 1) * 4  # the block header follows the 12-byte stream header; its first byte is its size
    header = x[12:12 + size]
    props = header.index(b"\x21\x01") + 2  # filter id 0x21 (LZMA2), one byte of properties
    header[props] = 40
    header[-4:] = struct.pack("<I", zlib.crc32(bytes(header[:-4])))
    x[12:12 + size] = header
    return bytes(x)


def _write(root: str, name: str, data: bytes) -> str:
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _compressed(root: str, data_txt: str) -> list[CliCase]:
    one_stream = lzma.compress(TEXT * (STREAM_TEXT // len(TEXT)), preset=0)  # 16 MiB of text in ~2 KiB
    small = lzma.compress(TEXT * 200)
    files = {
        # Shapes of bomb: one long stream, 64 streams of 16 MiB (1 GiB in all), streams with padding.
        "xz_bomb_one_stream": (lzma.compress(TEXT * ((80 << 20) // len(TEXT)), preset=0), "more than 64 mib"),
        "xz_bomb_concatenated_streams": (one_stream * 64, "more than 64 mib"),
        "xz_bomb_padded_streams": ((one_stream + b"\x00" * 8) * 8, "more than 64 mib"),
        "xz_truncated": (lzma.compress(TEXT * 5000)[:-64], "ends early"),
        "xz_header_only": (lzma.compress(TEXT * 5000)[:24], "ends early"),
        "xz_trailing_junk": (small + b"not xz at all", "not a valid .xz"),
        "xz_named_but_plain_text": (TEXT * 200, "no xz header"),
        "xz_huge_dictionary": (huge_dictionary_xz(TEXT * 200), "dictionary"),
        "gzip_data": (gzip.compress(TEXT * 200), "gzip-compressed"),
        "bzip2_data": (bz2.compress(TEXT * 200), "bzip2-compressed"),
    }
    cases = []
    for name, (data, expect) in files.items():
        ext = {"gzip_data": ".gz", "bzip2_data": ".bz2"}.get(name, ".xz")
        path = _write(root, name + ext, data)
        out = os.path.join(root, f"{name}.safetensors")
        cases.append(CliCase(name, "compressed", ("train", "--data", path, "--out", out, *TRAIN_FLAGS), expect))
    # Valid: two streams of text concatenated (as `cat a.xz b.xz` makes), and plain text beside it.
    two = _write(root, "two_streams.xz", lzma.compress(TEXT * 200) + lzma.compress(TEXT * 200))
    cases.append(CliCase("xz_two_streams_valid", "compressed",
                         ("train", "--data", two, data_txt, "--out", os.path.join(root, "two.safetensors"),
                          *TRAIN_FLAGS), None))
    return cases


def _heads_text(root: str, huge: str, ctx32k: str) -> list[CliCase]:
    many = _write(root, "many_paragraphs.txt", b"a\n\n" * 200_000)
    one = _write(root, "one_paragraph.txt", TEXT * (160_000 // len(TEXT)))
    few = _write(root, "few_paragraphs.txt", b"\n\n".join([TEXT * 4] * 6))
    return [
        CliCase("heads_200k_paragraphs", "heads_text", ("heads", ctx32k, "--text", many, "--device", "cpu"),
                "more than the 1,000"),
        CliCase("heads_160kb_paragraph_32k_context", "heads_text",
                ("heads", ctx32k, "--text", one, "--device", "cpu"), "paragraphs of at most"),
        CliCase("heads_160kb_paragraph_huge_context", "heads_text",
                ("heads", huge, "--text", one, "--device", "cpu"), "memory budget"),
        CliCase("heads_length_past_budget", "heads_text", ("heads", huge, "--length", "200000", "--device", "cpu"),
                "shorter --length (at most"),
        CliCase("heads_batch_past_budget", "heads_text", ("heads", huge, "--batch", "10000000", "--device", "cpu"),
                "or fewer at this length"),
        CliCase("heads_few_paragraphs_valid", "heads_text", ("heads", ctx32k, "--text", few, "--device", "cpu"),
                None),
    ]


def _prompt_size(root: str, huge: str) -> list[CliCase]:
    words = b"the cat sat on the mat and the dog ran far away "
    prompt = (words * (PROMPT_BYTES // len(words) + 1))[:PROMPT_BYTES].decode()
    png = os.path.join(root, "prompt.png")
    return [
        CliCase("predict_127kib_prompt_huge_context", "prompt_size",
                ("predict", huge, "--prompt", prompt, "--device", "cpu"), "attention scores"),
        CliCase("scan_127kib_prompt_huge_context", "prompt_size",
                ("scan", huge, "--prompt", prompt, "--device", "cpu", "--no-progress"), "attention scores"),
        CliCase("export_127kib_prompt_huge_context", "prompt_size",
                ("export", "--checkpoint", huge, "--prompt", prompt, "--out", png, "--device", "cpu"),
                "attention scores"),
        CliCase("predict_prompt_past_char_bound", "prompt_size",
                ("predict", huge, "--prompt", "ab " * 1_400_000, "--device", "cpu"), "characters"),
    ]


def _train_record(root: str, data_txt: str) -> list[CliCase]:
    base = os.path.join(root, "trained_base.safetensors")
    save_tiny(base, config=GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16))
    with safe_open(base, framework="pt") as f:
        meta, state = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    good = {"steps": 2, "wall_time_s": 1.0, "final_train_loss": 10.8, "final_val_loss": 10.8,
            "history": [{"step": 1, "train_loss": 10.8, "val_loss": 10.8},
                        {"step": 2, "train_loss": 10.8, "val_loss": 10.8}],
            "command": ["transformer-viewer", "train"]}

    def variant(name: str, change) -> str:
        """The good record changed in place by `change(record)`, or replaced by what it returns."""
        record = json.loads(json.dumps(good))
        replaced = change(record)
        record = record if replaced is None else replaced
        path = os.path.join(root, f"{name}.safetensors")
        save_file(state, path, metadata={**meta, "training": json.dumps(record)})
        return path

    def pop(key):
        def change(record):
            del record["history"][1][key]
        return change

    def put(where, key, value):
        def change(record):
            (record if where is None else record[where][0])[key] = value
        return change

    variants = {
        "resume_history_lacks_val_loss": (pop("val_loss"), "history[1] has no val_loss"),
        "resume_history_lacks_step": (pop("step"), "history[1] has no step"),
        "resume_history_step_is_text": (put("history", "step", "3"), "history[0].step must be"),
        "resume_history_val_loss_is_text": (put("history", "val_loss", "low"), "history[0].val_loss must be"),
        "resume_history_of_numbers": (put(None, "history", [1, 2]), "field history must be a list of objects"),
        "resume_negative_steps": (put(None, "steps", -5), "field steps must be"),
        "resume_steps_past_any_run": (put(None, "steps", 10**30), "field steps must be"),
        "resume_resumed_entry_bad": (put(None, "resumed", [{"from_step": "x"}]), "resumed[0].from_step must be"),
        "resume_record_is_a_list": (lambda r: [1, 2], "not a json object"),
    }
    cases = []
    for name, (change, expect) in variants.items():
        path = variant(name, change)
        cases.append(CliCase(name, "train_record",
                             ("train", "--data", data_txt, "--out", path, "--resume", *TRAIN_FLAGS[:-6],
                              "--steps", "4", "--device", "cpu"), expect, keep=(path,)))
    valid = variant("resume_complete_record", lambda r: None)
    cases.append(CliCase("resume_complete_record_valid", "train_record",
                         ("train", "--data", data_txt, "--out", valid, "--resume", "--steps", "3", "--device", "cpu"),
                         None))
    return cases


def build(root: str) -> list[CliCase]:
    os.makedirs(root, exist_ok=True)
    data_txt = _write(root, "data.txt", TEXT * 200)
    huge = save_tiny(os.path.join(root, "huge_context.safetensors"), config=HUGE_CONTEXT)
    ctx32k = save_tiny(os.path.join(root, "context_32k.safetensors"), config=CONTEXT_32K)
    return (_compressed(root, data_txt) + _heads_text(root, huge, ctx32k) + _prompt_size(root, huge)
            + _train_record(root, data_txt))
