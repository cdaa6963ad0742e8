"""A plain state dict of the tutorial-style `GPTStyleModel`:

    tok_emb      nn.Embedding(V, C)
    pos_emb      nn.Embedding(T, C), or a (T, C) / (1, T, C) / (T, 1, C) table (parameter or buffer)
    blocks.N.ln1, blocks.N.ln2          nn.LayerNorm(C)
    blocks.N.attn                       nn.MultiheadAttention(C, n_head) (fused in_proj_weight,
                                        or q/k/v_proj_weight), causal mask applied in forward
    blocks.N.ff.net                     nn.Sequential(Linear(C, M), activation, Linear(M, C)[, Dropout])
    ln_f, head                          nn.LayerNorm(C), nn.Linear(C, V)

run as pre-LN blocks: x + attn(ln1(x)), then x + ff(ln2(x)), then head(ln_f(x)).

What the weights cannot say, and what we assume:
- The head count (nn.MultiheadAttention's in_proj mixes all heads): from `n_head` (`--n-head`),
  or from a `config` dict saved beside the state; without either it is a CheckpointError.
- The activation (GELU and ReLU have no weights): from that `config` dict when it names one,
  else exact GELU, the default of `nn.GELU()` that most tutorials use.
- Pre-LN order, as GPT-2; a post-LN model would load but compute something else.
- No position table at all means the fixed sin/cos table of "Attention Is All You Need".
A fixed sinusoidal buffer that *is* in the file is loaded as our learned table: same numbers.
Missing biases (e.g. a bias-free MultiheadAttention beside biased Linears) are zeros. A
non-zero `head.bias` is kept (`config.extra["head_bias"]`); an all-zero one is dropped.
"""

from __future__ import annotations

import re

import torch

from transformer_viewer.model.checkpoints.formats import gpt2_layout
from transformer_viewer.model.decoder.config import GPTConfig
from transformer_viewer.model.errors import CheckpointError

WRAPPER_KEYS = ("state_dict", "model_state_dict", "model")
HINT_KEYS = ("config", "model_config", "args", "hparams", "hyperparameters")
N_HEAD_HINTS = ("n_head", "num_heads", "nhead", "n_heads", "num_attention_heads")
ACTIVATION_HINTS = ("activation", "activation_function", "act")
ACTIVATION_NAMES = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_tanh": "gelu_tanh", "tanh": "gelu_tanh", "relu": "relu"}
SINUSOIDAL_BLOCK_SIZE = 1024
MAX_LAYERS = 1024  # GPTConfig's ceiling on n_layer
MAX_INDEX_DIGITS = 6  # blocks.N / ff.net.N: past this the number is no layer index
_ATTN = re.compile(r"^blocks\.(\d+)\.attn\.(in_proj_weight|q_proj_weight)$")
_BLOCK = re.compile(r"^blocks\.(\d+)\.")
_FF = re.compile(r"^ff\.net\.(\d{1,6})\.weight$")  # within a block


def _tensor_dict(obj) -> bool:
    return (isinstance(obj, dict) and bool(obj) and all(isinstance(k, str) for k in obj)
            and all(isinstance(v, torch.Tensor) for v in obj.values()))


def unwrap(obj) -> tuple[dict, dict] | None:
    """(state dict, hints) from a bare state dict or one wrapped as {"model_state_dict": ..., "config": ...}."""
    if _tensor_dict(obj):
        state, hints = obj, {}
    elif isinstance(obj, dict):
        inner = next((obj[k] for k in WRAPPER_KEYS if _tensor_dict(obj.get(k))), None)
        if inner is None:
            return None
        state = inner
        hints = {k: v for k, v in obj.items() if not isinstance(v, dict | torch.Tensor)}
        for k in HINT_KEYS:
            if isinstance(obj.get(k), dict):
                hints.update(obj[k])
    else:
        return None
    state = {gpt2_layout.strip_wrappers(k): v for k, v in state.items()}
    return state, hints


def is_tutorial(obj) -> bool:
    found = unwrap(obj)
    return found is not None and "tok_emb.weight" in found[0] and any(_ATTN.match(k) for k in found[0])


def read_tutorial(path: str, obj, n_head: int | None = None) -> tuple[GPTConfig, dict[str, torch.Tensor], dict]:
    src, hints = unwrap(obj)
    src = dict(src)
    used: set[str] = set()
    names: dict[str, str] = {}
    state: dict[str, torch.Tensor] = {}

    def take(ours: str, theirs: str, shape: tuple[int, ...]) -> None:
        names[ours] = theirs
        if theirs in src:
            state[ours] = _shaped(path, src, theirs, shape)
            used.add(theirs)

    wte = src["tok_emb.weight"]
    if wte.dim() != 2:
        raise CheckpointError(f"{path}: tok_emb.weight has shape {tuple(wte.shape)}; expected (vocab, n_embd)")
    V, C = wte.shape
    n_head = _n_head(path, n_head, hints, C)
    blocks = _blocks(path, src)  # one pass over the keys, the layer cap checked before any layer is read
    n_layer = max((layer for layer, keys in blocks.items() if any(_ATTN.match(k) for k in keys)), default=-1) + 1
    V, C = int(V), int(C)
    take("wte.weight", "tok_emb.weight", (V, C))
    block_size, positional = _positions(path, src, used, state, names, C)
    n_mlp = None
    # Every tensor is checked against the shape the config-to-be gives it (V, C, and the MLP
    # width of the first layer) as it is taken, before anything stacks or indexes it.
    for layer in range(n_layer):
        b = ob = f"blocks.{layer}"  # the tutorial and we both say blocks.N
        for ours, theirs in (("ln_1", "ln1"), ("ln_2", "ln2")):
            take(f"{ob}.{ours}.weight", f"{b}.{theirs}.weight", (C,))
            take(f"{ob}.{ours}.bias", f"{b}.{theirs}.bias", (C,))
        _attention(path, src, used, state, names, b, C)
        take(f"{ob}.attn.c_proj.weight", f"{b}.attn.out_proj.weight", (C, C))
        take(f"{ob}.attn.c_proj.bias", f"{b}.attn.out_proj.bias", (C,))
        prefix = len(b) + 1
        linears = sorted(int(m.group(1)) for k in blocks.get(layer, ()) if (m := _FF.match(k[prefix:]))
                         and src[k].dim() == 2)
        if len(linears) != 2:
            raise CheckpointError(f"{path}: {b}.ff.net has {len(linears)} Linear layers; expected two "
                                  "(Linear, activation, Linear)")
        if n_mlp is None:
            n_mlp = int(src[f"{b}.ff.net.{linears[0]}.weight"].shape[0])
        for ours, index, shape in (("c_fc", linears[0], (n_mlp, C)), ("c_proj", linears[1], (C, n_mlp))):
            take(f"{ob}.mlp.{ours}.weight", f"{b}.ff.net.{index}.weight", shape)
            take(f"{ob}.mlp.{ours}.bias", f"{b}.ff.net.{index}.bias", shape[:1])
    take("ln_f.weight", "ln_f.weight", (C,))
    take("ln_f.bias", "ln_f.bias", (C,))
    take("lm_head.weight", "head.weight", (V, C))
    extra = {}
    head_bias = src.get("head.bias")
    if head_bias is not None:
        head_bias = _shaped(path, src, "head.bias", (V,))
        used.add("head.bias")
        if bool(torch.any(head_bias != 0)):
            state["lm_head.bias"], names["lm_head.bias"] = head_bias, "head.bias"
            extra["head_bias"] = True
    bias = any(k.endswith("bias") for k in state if k != "lm_head.bias")
    if bias:
        _zero_fill_biases(state, n_layer)
    for k in src:
        if k not in used:
            state[k] = src[k]  # left in the file's name: build_model reports it as unexpected
    activation = _activation(hints)
    try:
        config = GPTConfig(block_size=block_size, vocab_size=int(V), n_layer=n_layer, n_head=n_head, n_embd=int(C),
                           bias=bias, activation=activation, positional=positional,
                           tie_embeddings=gpt2_layout.tied(state), n_mlp=n_mlp or 0, extra=extra)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: these weights make no valid model: {e}") from None
    info = {"tokenizer": "gpt2", "training": {"source_format": "tutorial", "assumed_activation": activation},
            "key_name": lambda ours: names.get(ours, ours)}
    return config, state, info


def _blocks(path: str, src: dict) -> dict[int, list[str]]:
    """Keys grouped by their `blocks.N` layer, refusing indices no model has before any is used."""
    blocks: dict[int, list[str]] = {}
    for k in src:
        m = _BLOCK.match(k)
        if m is None:
            continue
        digits = m.group(1)
        if len(digits) > MAX_INDEX_DIGITS or int(digits) >= MAX_LAYERS:
            shown = digits if len(digits) <= 12 else digits[:12] + "…"
            raise CheckpointError(f"{path}: a key names layer {shown}, past the {MAX_LAYERS} layers a model can have; "
                                  "the file is damaged")
        blocks.setdefault(int(digits), []).append(k)
    return blocks


def _n_head(path: str, n_head: int | None, hints: dict, C: int) -> int:
    if n_head is None:
        n_head = next((hints[k] for k in N_HEAD_HINTS if isinstance(hints.get(k), int)), None)
    if n_head is None:
        raise CheckpointError(f"{path}: a tutorial-style state dict does not record its head count "
                              f"(nn.MultiheadAttention fuses the heads); pass --n-head N, where N divides n_embd={C}")
    if not isinstance(n_head, int) or n_head <= 0 or C % n_head:
        raise CheckpointError(f"{path}: --n-head {n_head} does not divide n_embd={C}; give the head count the model "
                              "was built with")
    return n_head


def _positions(path, src, used, state, names, C) -> tuple[int, str]:
    keys = [k for k in ("pos_emb.weight", "pos_emb") if k in src]
    keys = keys or [k for k in src if k.startswith("pos_emb.")]
    if not keys:
        return SINUSOIDAL_BLOCK_SIZE, "sinusoidal"
    if len(keys) > 1:
        raise CheckpointError(f"{path}: several position tables ({', '.join(keys[:3])}); expected one pos_emb")
    table = src[keys[0]]
    if table.dim() == 3 and 1 in table.shape[:2]:
        table = table.reshape(-1, table.shape[-1])  # (1, T, C) or (T, 1, C) -> (T, C)
    if table.dim() != 2 or table.shape[1] != C:
        raise CheckpointError(f"{path}: shape mismatch for {keys[0]}: expected (block_size, {C}), found {tuple(src[keys[0]].shape)}")
    state["wpe.weight"], names["wpe.weight"] = table, keys[0]
    used.add(keys[0])
    return int(table.shape[0]), "learned"


def _shaped(path: str, src: dict, key: str, shape: tuple[int, ...]) -> torch.Tensor:
    """src[key], refused in one line unless it has `shape`."""
    t = src[key]
    if tuple(t.shape) != shape:
        raise CheckpointError(f"{path}: shape mismatch for {key}: expected {shape}, found {tuple(t.shape)}; the "
                              "weights do not make one model")
    return t


def _attention(path, src, used, state, names, b, C) -> None:
    for k in (f"{b}.attn.bias_k", f"{b}.attn.bias_v"):
        if k in src:
            raise CheckpointError(f"{path}: {k} (MultiheadAttention add_bias_kv=True) is not supported by this decoder")
    fused = f"{b}.attn.in_proj_weight"
    if fused in src:
        state[f"{b}.attn.c_attn.weight"] = _shaped(path, src, fused, (3 * C, C))  # q, k, v stacked, as our c_attn
        used.add(fused)
    else:
        parts = [f"{b}.attn.{x}_proj_weight" for x in "qkv"]
        if not any(p in src for p in parts):
            raise CheckpointError(f"{path}: missing keys {fused}; the file does not hold a complete model")
        missing = [p for p in parts if p not in src]
        if missing:
            raise CheckpointError(f"{path}: missing keys {', '.join(missing)}; the attention weights are incomplete")
        state[f"{b}.attn.c_attn.weight"] = torch.cat([_shaped(path, src, p, (C, C)) for p in parts], dim=0)  # (3C, C)
        used.update(parts)
    names[f"{b}.attn.c_attn.weight"] = fused
    if f"{b}.attn.in_proj_bias" in src:
        state[f"{b}.attn.c_attn.bias"] = _shaped(path, src, f"{b}.attn.in_proj_bias", (3 * C,))
        used.add(f"{b}.attn.in_proj_bias")
    names[f"{b}.attn.c_attn.bias"] = f"{b}.attn.in_proj_bias"


def _zero_fill_biases(state, n_layer) -> None:
    """Biases the file lacks are zeros: a bias-free layer computes the same as a zero bias."""
    modules = [f"blocks.{layer}.{m}" for layer in range(n_layer)
               for m in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")] + ["ln_f"]
    for module in modules:
        w = state.get(f"{module}.weight")
        if w is not None and f"{module}.bias" not in state:
            state[f"{module}.bias"] = torch.zeros(w.shape[0], dtype=w.dtype)


def _activation(hints: dict) -> str:
    for k in ACTIVATION_HINTS:
        v = hints.get(k)
        if isinstance(v, str) and v.lower() in ACTIVATION_NAMES:
            return ACTIVATION_NAMES[v.lower()]
    return "gelu"
