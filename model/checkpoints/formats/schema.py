"""What a checkpoint says about itself, checked before any of it is used: the types of our own
config fields, nanoGPT's `model_args`, our training record, and the names of a state dict.

A config value of the wrong type used to pass the range checks (`float("0.1")` works) and
fail later in the middle of a forward; a tensor where a flag belongs raised from `bool()`.
Each check raises ValueError with one line (the readers wrap it in their own CheckpointError,
which names the file) or, where a reader has no wrapper, CheckpointError itself.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from transformer_viewer.model.decoder.config import MAX_BLOCK_SIZE, GPTConfig, float32_problem
from transformer_viewer.model.errors import CheckpointError

MAX_NAME_CHARS = 256  # an activation or positional name; longer is not a name
NANOGPT_INTS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")


def describe_value(value: object) -> str:
    """`'0.1' (a string)`: what a wrong value is, short enough for one line."""
    kinds = {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    kind = kinds.get(type(value), f"a {type(value).__name__}")
    if isinstance(value, list | tuple | dict) and len(value) > 8:
        return f"{kind} of {len(value):,} items"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1000:
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"  # repr() refuses past 4,300
    shown = repr(value[:41] if isinstance(value, str) else value)  # never the repr of a huge string
    if len(shown) > 40:
        shown = shown[:40] + "…"
    return f"{shown} ({kind})"


def is_finite_number(value: object) -> bool:
    """An int or float (never a bool, string or tensor) that a float can hold finitely."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int past 1e308
        return False


# The fields of a rotary parameters object (`rope_parameters`, one layer type's object in it, or
# the published `rope_scaling`) and what each must be; null is absent, as transformers reads it.
# Every family's rotary reader checks the whole object here before it computes anything from it:
# a string where a number belongs, or a number float32 cannot hold, is one line, never a
# TypeError or a division by zero halfway through the YaRN or longrope arithmetic.
ROPE_FIELDS = {
    "rope_type": "name", "type": "name",
    "rope_theta": "positive", "partial_rotary_factor": "positive", "factor": "number",
    "original_max_position_embeddings": "context",
    "low_freq_factor": "positive", "high_freq_factor": "positive",  # llama3
    "beta_fast": "positive", "beta_slow": "positive", "truncate": "flag",  # yarn
    "mscale": "non-negative", "mscale_all_dim": "non-negative",  # yarn's attention factor: 1 + 0.1 m ln(factor)
    "attention_factor": "positive",  # yarn, longrope
    "short_factor": "list", "long_factor": "list",  # longrope: each entry checked by its reader
    "llama_4_scaling_beta": "non-negative",  # Ministral 3
    "mrope_section": "list", "mrope_interleaved": "flag",  # Qwen-VL's multimodal rotary
}
_ROPE_KINDS = {  # kind: (what it must be, test)
    "name": ("a short string", lambda v: isinstance(v, str) and len(v) <= MAX_NAME_CHARS),
    "flag": ("true or false", lambda v: isinstance(v, bool)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "context": (f"a positive integer of at most {MAX_BLOCK_SIZE:,}",
                lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_BLOCK_SIZE),
    "number": ("a number within float32's range", lambda v: is_float32_number(v)),
    "positive": ("a positive number within float32's range", lambda v: is_float32_number(v) and v > 0),
    "non-negative": ("a number of 0 or more within float32's range", lambda v: is_float32_number(v) and v >= 0),
}


def check_rope_fields(params: dict, where: str) -> None:
    """Each field of ROPE_FIELDS present in `params` is what it must be; ValueError otherwise,
    naming the field in `where` (the object that holds it)."""
    for key in ROPE_FIELDS:
        problem = rope_field_problem(key, params.get(key))
        if problem:
            raise ValueError(f"{where}: {key} {problem}")


def rope_field_problem(key: str, value: object) -> str | None:
    """"must be ..., got ..." when `value` is not what rotary field `key` must be; None when it
    is, or is null (absent)."""
    if value is None:
        return None
    what, ok = _ROPE_KINDS[ROPE_FIELDS[key]]
    return None if ok(value) else f"must be {what}, got {describe_value(value)}"


def is_float32_number(value: object) -> bool:
    """A finite number (never a bool or string) that float32 holds: zero, or a magnitude between
    its smallest normal value and its largest."""
    return is_finite_number(value) and float32_problem(float(value)) is None


def check_config_fields(d: dict) -> None:
    """Each GPTConfig field present in `d` has the type its annotation names: int, float,
    bool, str, dict or list (optionally `| None`); fields of other types are left to the config."""
    for f in dataclasses.fields(GPTConfig):
        if f.name not in d:
            continue
        problem = _type_problem(str(f.type), d[f.name])
        if problem:
            raise ValueError(f"config field {f.name} must be {problem}, got {describe_value(d[f.name])}")


def _type_problem(annotation: str, value: object) -> str | None:
    """What `value` should have been, or None when it fits `annotation`."""
    parts = [p.strip() for p in annotation.split("|")]
    if "None" in parts and value is None:
        return None
    wanted = []
    for part in (p for p in parts if p != "None"):
        base = part.split("[", 1)[0]
        if base == "int":
            ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif base == "float":
            ok, what = is_finite_number(value), "a finite number"
        elif base == "bool":
            ok, what = isinstance(value, bool), "true or false"
        elif base == "str":
            ok, what = isinstance(value, str) and len(value) <= MAX_NAME_CHARS, "a short string"
        elif base == "dict":
            ok, what = isinstance(value, dict), "an object"
        elif base in ("list", "tuple"):
            ok, what = isinstance(value, list | tuple), "a list"
        else:
            return None  # a type this check does not know: the config validates it
        if ok:
            return None
        wanted.append(what)
    return " or ".join(wanted) if wanted else None


def check_model_args(args: dict) -> None:
    """nanoGPT's model_args: the sizes are integers, dropout a finite number, bias a flag."""
    for name in NANOGPT_INTS:
        value = args[name]
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"config field {name} must be an integer, got {describe_value(value)}")
        if abs(value) >= 1 << 63:  # a pickle holds ints of any length; no size is that large
            raise ValueError(f"config field {name} is out of range, got {describe_value(value)}")
    dropout = args.get("dropout", 0.0)
    if dropout is not None and not is_finite_number(dropout):
        raise ValueError(f"model_args dropout must be a finite number, got {describe_value(dropout)}")
    if "bias" in args and not isinstance(args["bias"], bool):
        raise ValueError(f"model_args bias must be true or false, got {describe_value(args['bias'])}")


MAX_STEP = 1 << 53  # a step count past this is no run's (and a float no longer holds it exactly)


def _is_step(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_STEP


def _is_number(v: object) -> bool:  # NaN allowed: a run saved before its first step has no loss yet
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_strings(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# An evaluation in the record's history, and a resume in its `resumed` list: field -> (what it
# must be, check). `train --resume` continues the history and reads the last val_loss.
HISTORY_FIELDS = {"step": ("a step count", _is_step), "train_loss": ("a number", _is_number),
                  "val_loss": ("a number", _is_number)}
RESUMED_FIELDS = {"from_step": ("a step count", _is_step), "optimizer_restored": ("true or false",
                                                                                  lambda v: isinstance(v, bool)),
                  "command": ("a list of strings", _is_strings)}

# Fields of our training record that `train --resume` and `info` read, and what they must be.
TRAINING_FIELDS = {
    "steps": ("a non-negative integer", _is_step),
    "wall_time_s": ("a number", _is_number),
    "final_train_loss": ("a number", _is_number),
    "final_val_loss": ("a number", _is_number),
    "history": ("a list of objects", lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v)),
    "resumed": ("a list of objects", lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v)),
    "command": ("a list of strings", _is_strings),
}
# Lists of entries in the record, and the fields of each entry.
TRAINING_ENTRIES = {"history": HISTORY_FIELDS, "resumed": RESUMED_FIELDS}
RESAVE = "re-save it with save_checkpoint"


def check_training(where: str, record: object) -> dict:
    """Our free-form training record: an object whose known fields, and the known fields of each
    entry of its history and of its resumes, have their types."""
    if not isinstance(record, dict):
        raise CheckpointError(f"{where} is {describe_value(record)}, not a JSON object; {RESAVE}")
    for name, (what, ok) in TRAINING_FIELDS.items():
        if name in record and not ok(record[name]):
            raise CheckpointError(f"{where}: field {name} must be {what}, got {describe_value(record[name])}; {RESAVE}")
    for name, fields in TRAINING_ENTRIES.items():
        for i, entry in enumerate(record.get(name, [])):
            for field, (what, ok) in fields.items():
                if field in entry and not ok(entry[field]):
                    raise CheckpointError(f"{where}: {name}[{i}].{field} must be {what}, got "
                                          f"{describe_value(entry[field])}; {RESAVE}")
    return record


def check_resumable(where: str, record: dict) -> dict:
    """A record `check_training` passed, which a run can continue: every history entry has its
    step and both losses, every resume its fields (a record may lack both lists: a run that
    never reached an evaluation). Says what is missing and how to go on without it."""
    for name, fields in TRAINING_ENTRIES.items():
        for i, entry in enumerate(record.get(name, [])):
            missing = [f for f in fields if f not in entry]
            if missing:
                raise CheckpointError(f"{where}: {name}[{i}] has no {' or '.join(missing)}, which --resume "
                                      "continues from; train a new run into another --out (or --overwrite)")
    return record


def check_state_names(path: str, obj: object) -> None:
    """Every key of a state dict is a string: a parameter is found by its name, and an int or
    tuple key names nothing. Checked on the checkpoint itself when it is a dict, and on each
    dict inside it that holds tensors (the state a wrapper carries); other members, such as a
    record of losses by epoch, may use any keys."""
    dicts = [obj] if isinstance(obj, dict) else []
    if isinstance(obj, dict):
        dicts += [v for v in obj.values()
                  if isinstance(v, dict) and any(isinstance(x, torch.Tensor) for x in v.values())]
    for d in dicts:
        for key in d:
            if not isinstance(key, str):
                raise CheckpointError(f"{path}: holds a dict with the key {describe_value(key)}, not a parameter "
                                      "name; save the model's state_dict(), whose keys are names")
